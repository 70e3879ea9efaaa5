package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// rlsCerts is the TLS of the rate-limit service: the files of rls.tls as
// last loaded, read again when one of them changes. A handshake takes
// whatever set is current, so a rotated certificate serves new
// connections without a restart, and connections open on the old one
// stay open.
type rlsCerts struct {
	files config.RLSTLS
	log   *slog.Logger

	cur atomic.Pointer[tls.Config]

	mu  sync.Mutex // one reload at a time
	sum [sha256.Size]byte
}

// loadRLSCerts reads the files of t; an error names the file at fault.
func loadRLSCerts(t config.RLSTLS, log *slog.Logger) (*rlsCerts, error) {
	c := &rlsCerts{files: t, log: log}
	cfg, sum, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cfg)
	c.sum = sum
	return c, nil
}

// load reads and parses the files into the config one handshake uses,
// with the digest of what it read.
func (c *rlsCerts) load() (*tls.Config, [sha256.Size]byte, error) {
	read := func(key, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("rls.tls.%s: %w", key, err)
		}
		return data, nil
	}
	certPEM, err1 := read("cert", c.files.Cert)
	keyPEM, err2 := read("key", c.files.Key)
	caPEM, err3 := read("client_ca", c.files.ClientCA)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	// Lengths first, so that moving bytes from one file to the next is a
	// change too.
	h := sha256.New()
	for _, d := range [][]byte{certPEM, keyPEM, caPEM} {
		fmt.Fprintf(h, "%d:", len(d))
		h.Write(d)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])

	cert, err := tlsfiles.KeyPair(certPEM, keyPEM)
	if err != nil {
		var pe *tlsfiles.PEMError
		if errors.As(err, &pe) && pe.Cert {
			return nil, sum, fmt.Errorf("rls.tls.cert: %q: %w", c.files.Cert, err)
		}
		return nil, sum, fmt.Errorf("rls.tls.key: %q: %w", c.files.Key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// gRPC clients require HTTP/2 by ALPN; the config that
		// GetConfigForClient returns replaces the server's, protocols
		// included.
		NextProtos: []string{"h2"},
	}
	if caPEM != nil {
		pool, err := tlsfiles.CertPool(caPEM)
		if err != nil {
			return nil, sum, fmt.Errorf("rls.tls.client_ca: %q: %w", c.files.ClientCA, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, sum, nil
}

// reload reads the files again and swaps them in if they changed and
// load. Files that do not load leave the running set serving, with an
// ERROR line: a certificate written before its key is refused until the
// key follows.
func (c *rlsCerts) reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, sum, err := c.load()
	if err == nil && bytes.Equal(sum[:], c.sum[:]) {
		return
	}
	if err != nil {
		c.log.Error("rate-limit service TLS files refused; the running certificate stays", "error", err.Error())
		return
	}
	c.cur.Store(cfg)
	c.sum = sum
	leaf := cfg.Certificates[0].Leaf
	c.log.Info("rate-limit service certificate reloaded", "subject", leaf.Subject.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", c.files.ClientCA != "")
}

// tlsConfig is the listener's config: every handshake gets the set
// current at that moment.
func (c *rlsCerts) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.cur.Load(), nil
		},
	}
}

// watch reloads when a file of rls.tls changes.
func (c *rlsCerts) watch() (stop func(), err error) {
	return watchFiles([]string{c.files.Cert, c.files.Key, c.files.ClientCA}, c.reload, func(dir string, err error) {
		c.log.Warn("watching the rate-limit service TLS files", "dir", dir, "error", err.Error())
	})
}

// watchFiles calls reload when one of paths changes, watching the
// directory of each, as the config file is watched (reloader.watch): a
// rename over the file, and Kubernetes' "..data" swap of a mounted
// secret, are changes too. Empty paths are skipped.
func watchFiles(paths []string, reload func(), warn func(dir string, err error)) (stop func(), err error) {
	names := map[string]map[string]bool{} // directory -> base names
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		dir := filepath.Dir(abs)
		if names[dir] == nil {
			names[dir] = map[string]bool{"..data": true}
		}
		names[dir][filepath.Base(abs)] = true
	}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for dir, base := range names {
		s, err := watchDir(dir, func(b string) bool { return base[b] }, reload, func(err error) { warn(dir, err) })
		if err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}
