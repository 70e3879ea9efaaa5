package main

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// rlsCerts is the TLS of the rate-limit service: the files of rls.tls,
// reloaded when one of them changes (tlsSet). A certificate written before
// its key is refused until the key follows.
type rlsCerts struct {
	tlsSet
	files config.RLSTLS
}

// loadRLSCerts reads the files of t; an error names the file at fault.
func loadRLSCerts(t config.RLSTLS, log *slog.Logger) (*rlsCerts, error) {
	c := &rlsCerts{files: t}
	c.tlsSet = tlsSet{
		block: "rls.tls",
		files: []tlsFile{{"cert", t.Cert}, {"key", t.Key}, {"client_ca", t.ClientCA}},
		build: c.build,
		log:   log,
	}
	if err := c.init(); err != nil {
		return nil, err
	}
	return c, nil
}

// build is the config one handshake uses, of the cert, key and client_ca
// files' contents.
func (c *rlsCerts) build(pem [][]byte) (*tls.Config, error) {
	certPEM, keyPEM, caPEM := pem[0], pem[1], pem[2]
	cert, err := tlsfiles.KeyPair(certPEM, keyPEM)
	if err != nil {
		var pe *tlsfiles.PEMError
		if errors.As(err, &pe) && pe.Cert {
			return nil, c.fileError("cert", err)
		}
		return nil, c.fileError("key", err)
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
			return nil, c.fileError("client_ca", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// reload reads the files again; files that do not load leave the running
// certificate serving, with an ERROR line.
func (c *rlsCerts) reload() {
	cfg, err := c.tlsSet.reload()
	if err != nil {
		c.log.Error("rate-limit service TLS files refused; the running certificate stays", "error", err.Error())
		return
	}
	if cfg == nil {
		return
	}
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
	return c.tlsSet.watch(c.reload, "watching the rate-limit service TLS files")
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
