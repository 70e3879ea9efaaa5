package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// xdsCerts is the TLS of the connection to the management server: the
// files of rls.xds.tls as last loaded, read again when one of them
// changes. Each handshake takes the set current at that moment, so a
// rotated client certificate or CA is used from the next connection on,
// and the connection open keeps the set it was made with.
type xdsCerts struct {
	files config.RLSXDSTLS
	log   *slog.Logger

	cur atomic.Pointer[tls.Config]

	mu  sync.Mutex // one reload at a time
	sum [sha256.Size]byte
}

// loadXDSCerts reads the files of t; an error names the file at fault.
func loadXDSCerts(t config.RLSXDSTLS, log *slog.Logger) (*xdsCerts, error) {
	c := &xdsCerts{files: t, log: log}
	cfg, sum, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cfg)
	c.sum = sum
	return c, nil
}

// load reads and parses the files into the config of one handshake, with
// the digest of what it read.
func (c *xdsCerts) load() (*tls.Config, [sha256.Size]byte, error) {
	read := func(key, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("rls.xds.tls.%s: %w", key, err)
		}
		return data, nil
	}
	caPEM, err1 := read("ca", c.files.CA)
	certPEM, err2 := read("cert", c.files.Cert)
	keyPEM, err3 := read("key", c.files.Key)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	// Lengths first, so that moving bytes from one file to the next is a
	// change too.
	h := sha256.New()
	for _, d := range [][]byte{caPEM, certPEM, keyPEM} {
		fmt.Fprintf(h, "%d:", len(d))
		h.Write(d)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])

	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.files.ServerName}
	if caPEM != nil {
		pool, err := tlsfiles.CertPool(caPEM)
		if err != nil {
			return nil, sum, fmt.Errorf("rls.xds.tls.ca: %q: %w", c.files.CA, err)
		}
		cfg.RootCAs = pool
	}
	if certPEM != nil || keyPEM != nil {
		cert, err := tlsfiles.KeyPair(certPEM, keyPEM)
		if err != nil {
			var pe *tlsfiles.PEMError
			if errors.As(err, &pe) && pe.Cert {
				return nil, sum, fmt.Errorf("rls.xds.tls.cert: %q: %w", c.files.Cert, err)
			}
			return nil, sum, fmt.Errorf("rls.xds.tls.key: %q: %w", c.files.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, sum, nil
}

// reload reads the files again and swaps them in if they changed and
// load. Files that do not load leave the running set in use, with an
// ERROR line; the open connection is not touched either way.
func (c *xdsCerts) reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, sum, err := c.load()
	if err == nil && bytes.Equal(sum[:], c.sum[:]) {
		return
	}
	if err != nil {
		c.log.Error("xDS client TLS files refused; new connections use the running ones", "error", err.Error())
		return
	}
	c.cur.Store(cfg)
	c.sum = sum
	args := []any{"ca", c.files.CA != ""}
	if len(cfg.Certificates) > 0 {
		leaf := cfg.Certificates[0].Leaf
		args = append(args, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.log.Info("xDS client TLS files reloaded", args...)
}

// watch reloads when a file of rls.xds.tls changes.
func (c *xdsCerts) watch() (stop func(), err error) {
	return watchFiles([]string{c.files.CA, c.files.Cert, c.files.Key}, c.reload, func(dir string, err error) {
		c.log.Warn("watching the xDS client TLS files", "dir", dir, "error", err.Error())
	})
}

// creds are the transport credentials of the client connection: gRPC's
// TLS, with the config current at each handshake.
func (c *xdsCerts) creds() credentials.TransportCredentials { return xdsCreds{c} }

type xdsCreds struct{ c *xdsCerts }

func (x xdsCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(x.c.cur.Load()).ClientHandshake(ctx, authority, conn)
}

func (x xdsCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the xDS client's credentials do not serve")
}

func (x xdsCreds) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(x.c.cur.Load()).Info()
}

func (x xdsCreds) Clone() credentials.TransportCredentials { return x }

// OverrideServerName is part of the interface; rls.xds.tls.server_name
// is the way to set the name.
func (x xdsCreds) OverrideServerName(string) error {
	return errors.New("set rls.xds.tls.server_name instead")
}
