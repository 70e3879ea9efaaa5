package main

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// tlsFile is one file of a TLS block: its config key (cert, key, ca ...)
// and its path, "" when not given.
type tlsFile struct{ key, path string }

// tlsSet is a set of TLS files as last loaded, read again when one of
// them changes (reload): each handshake takes the config current at that
// moment, so rotated files serve new connections without a restart, and
// the connections open keep theirs.
type tlsSet struct {
	// block is the config block, for errors: "rls.tls".
	block string
	files []tlsFile
	// build makes the config of one handshake of the files' contents,
	// in the order of files (nil for a file not given).
	build func(pem [][]byte) (*tls.Config, error)
	log   *slog.Logger

	cur atomic.Pointer[tls.Config]

	mu  sync.Mutex // one reload at a time
	sum [sha256.Size]byte
}

// init loads the files the first time; an error names the file at fault.
func (s *tlsSet) init() error {
	cfg, sum, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(cfg)
	s.sum = sum
	return nil
}

// load reads and parses the files, with the digest of what it read.
func (s *tlsSet) load() (*tls.Config, [sha256.Size]byte, error) {
	pem := make([][]byte, len(s.files))
	var errs []error
	for i, f := range s.files {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", s.block, f.key, err))
		}
		pem[i] = data
	}
	if err := errors.Join(errs...); err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	// Lengths first, so that moving bytes from one file to the next is a
	// change too.
	h := sha256.New()
	for _, d := range pem {
		fmt.Fprintf(h, "%d:", len(d))
		h.Write(d)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	cfg, err := s.build(pem)
	return cfg, sum, err
}

// fileError is err about the file of key, named with its path.
func (s *tlsSet) fileError(key string, err error) error {
	for _, f := range s.files {
		if f.key == key {
			return fmt.Errorf("%s.%s: %q: %w", s.block, key, f.path, err)
		}
	}
	return fmt.Errorf("%s.%s: %w", s.block, key, err)
}

// reload reads the files again and swaps them in if they changed and
// load: it returns the new config, or nil when nothing changed or the
// files did not load (err), which leaves the running config in use.
func (s *tlsSet) reload() (*tls.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, sum, err := s.load()
	if err != nil {
		return nil, err
	}
	if sum == s.sum {
		return nil, nil
	}
	s.cur.Store(cfg)
	s.sum = sum
	return cfg, nil
}

// watch calls reload when a file of the set changes; what watching
// fails to do is logged with msg.
func (s *tlsSet) watch(reload func(), msg string) (stop func(), err error) {
	paths := make([]string, len(s.files))
	for i, f := range s.files {
		paths[i] = f.path
	}
	return watchFiles(paths, reload, func(dir string, err error) {
		s.log.Warn(msg, "dir", dir, "error", err.Error())
	})
}
