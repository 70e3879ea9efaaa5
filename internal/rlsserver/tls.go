package rlsserver

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// rlsCerts is the TLS of the rate-limit service: the files of rls.tls,
// reloaded when one of them changes (tlsfiles.Set). A certificate written before
// its key is refused until the key follows.
type rlsCerts struct {
	tlsfiles.Set
	files config.RLSTLS
}

// loadRLSCerts reads the files of t; an error names the file at fault.
func loadRLSCerts(t config.RLSTLS, log *slog.Logger) (*rlsCerts, error) {
	c := &rlsCerts{files: t}
	c.Set = tlsfiles.Set{
		Block: "rls.tls",
		Files: []tlsfiles.File{{Key: "cert", Path: t.Cert}, {Key: "key", Path: t.Key}, {Key: "client_ca", Path: t.ClientCA}},
		Build: c.build,
		Log:   log,
	}
	if err := c.Init(); err != nil {
		return nil, err
	}
	return c, nil
}

// build is the config one handshake uses, of the cert, key and client_ca
// files' contents.
func (c *rlsCerts) build(pem [][]byte) (*tls.Config, error) {
	certPEM, keyPEM, caPEM := pem[0], pem[1], pem[2]
	cert, err := c.KeyPair("cert", "key", certPEM, keyPEM)
	if err != nil {
		return nil, err
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
			return nil, c.FileError("client_ca", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// reload reads the files again; files that do not load leave the running
// certificate serving, with an ERROR line.
func (c *rlsCerts) reload() {
	cfg, err := c.Set.Reload()
	if err != nil {
		c.Log.Error("rate-limit service TLS files refused; the running certificate stays", "error", err.Error())
		return
	}
	if cfg == nil {
		return
	}
	leaf := cfg.Certificates[0].Leaf
	c.Log.Info("rate-limit service certificate reloaded", "subject", leaf.Subject.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", c.files.ClientCA != "")
}

// tlsConfig is the listener's config: every handshake gets the set
// current at that moment.
func (c *rlsCerts) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.Current(), nil
		},
	}
}

// watch reloads when a file of rls.tls changes.
func (c *rlsCerts) watch() (stop func(), err error) {
	return c.Set.Watch(c.reload, "watching the rate-limit service TLS files")
}
