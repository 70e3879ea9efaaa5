package tlsfiles

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/floodgate-gw/floodgate/internal/filewatch"
)

// A File is one file of a TLS block: its config key (cert, key, ca ...)
// and its path, "" when not given.
type File struct{ Key, Path string }

// A Set is a set of TLS files as last loaded, read again when one of them
// changes (Reload): each handshake takes the config current at that
// moment (Current), so rotated files serve new connections without a
// restart, and the connections open keep theirs. The listener, the
// rate-limit service and its xDS client each hold one.
type Set struct {
	// Block is the config block, for errors: "rls.tls".
	Block string
	Files []File
	// Build makes the config of one handshake of the files' contents,
	// in the order of Files (nil for a file not given).
	Build func(pem [][]byte) (*tls.Config, error)
	Log   *slog.Logger

	cur atomic.Pointer[tls.Config]

	mu  sync.Mutex // one reload at a time
	sum [sha256.Size]byte
}

// Init loads the files the first time; an error names the file at fault.
func (s *Set) Init() error {
	cfg, sum, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(cfg)
	s.sum = sum
	return nil
}

// Current is the config last loaded.
func (s *Set) Current() *tls.Config { return s.cur.Load() }

// load reads and parses the files, with the digest of what it read.
func (s *Set) load() (*tls.Config, [sha256.Size]byte, error) {
	pem := make([][]byte, len(s.Files))
	var errs []error
	for i, f := range s.Files {
		if f.Path == "" {
			continue
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", s.Block, f.Key, err))
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
	cfg, err := s.Build(pem)
	return cfg, sum, err
}

// FileError is err about the file of key, named with its path.
func (s *Set) FileError(key string, err error) error {
	for _, f := range s.Files {
		if f.Key == key {
			return fmt.Errorf("%s.%s: %q: %w", s.Block, key, f.Path, err)
		}
	}
	return fmt.Errorf("%s.%s: %w", s.Block, key, err)
}

// KeyPair is KeyPair of the files of certKey and keyKey, whose error
// names the file at fault.
func (s *Set) KeyPair(certKey, keyKey string, certPEM, keyPEM []byte) (tls.Certificate, error) {
	cert, err := KeyPair(certPEM, keyPEM)
	if err != nil {
		var pe *PEMError
		if errors.As(err, &pe) && pe.Cert {
			return cert, s.FileError(certKey, err)
		}
		return cert, s.FileError(keyKey, err)
	}
	return cert, nil
}

// Reload reads the files again and swaps them in if they changed and
// load: it returns the new config, or nil when nothing changed or the
// files did not load (err), which leaves the running config in use.
func (s *Set) Reload() (*tls.Config, error) {
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

// Watch calls reload when a file of the set changes; what watching fails
// to do is logged with msg.
func (s *Set) Watch(reload func(), msg string) (stop func(), err error) {
	paths := make([]string, len(s.Files))
	for i, f := range s.Files {
		paths[i] = f.Path
	}
	return filewatch.Files(paths, reload, func(dir string, err error) {
		s.Log.Warn(msg, "dir", dir, "error", err.Error())
	})
}
