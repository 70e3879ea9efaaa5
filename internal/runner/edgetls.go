package runner

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// serverCerts is the TLS of server.listen_tls: the files of server.tls,
// reloaded when one of them changes (tlsfiles.Set).
type serverCerts struct {
	tlsfiles.Set
	conf config.ServerTLS
}

// loadServerCerts reads the files of t; an error names the file at fault.
func loadServerCerts(t config.ServerTLS, log *slog.Logger) (*serverCerts, error) {
	c := &serverCerts{conf: t}
	files := make([]tlsfiles.File, 0, 2*len(t.Certs)+1)
	for i, p := range t.Certs {
		files = append(files,
			tlsfiles.File{Key: fmt.Sprintf("certs[%d].cert", i), Path: p.Cert},
			tlsfiles.File{Key: fmt.Sprintf("certs[%d].key", i), Path: p.Key})
	}
	files = append(files, tlsfiles.File{Key: "client_ca", Path: t.ClientCA})
	c.Set = tlsfiles.Set{Block: "server.tls", Files: files, Build: c.build, Log: log}
	if err := c.Init(); err != nil {
		return nil, err
	}
	return c, nil
}

// build is the config one handshake uses, of the files' contents: the
// certificates in order, then the client CA.
func (c *serverCerts) build(pem [][]byte) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
	}
	if c.conf.MinVersion == config.TLS13 {
		cfg.MinVersion = tls.VersionTLS13
	}
	for i := range c.conf.Certs {
		cert, err := c.KeyPair(fmt.Sprintf("certs[%d].cert", i), fmt.Sprintf("certs[%d].key", i), pem[2*i], pem[2*i+1])
		if err != nil {
			return nil, err
		}
		// crypto/tls serves the first certificate whose names match the
		// client's SNI, and the first of all when none does.
		cfg.Certificates = append(cfg.Certificates, cert)
	}
	if caPEM := pem[len(pem)-1]; caPEM != nil {
		pool, err := tlsfiles.CertPool(caPEM)
		if err != nil {
			return nil, c.FileError("client_ca", err)
		}
		cfg.ClientCAs = pool
	}
	switch c.conf.ClientAuth {
	case config.ClientAuthRequest:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case config.ClientAuthRequire:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// reload reads the files again; files that do not load leave the running
// certificates serving, with an ERROR line.
func (c *serverCerts) reload() {
	cfg, err := c.Set.Reload()
	if err != nil {
		c.Log.Error("server TLS files refused; the running certificates stay", "error", err.Error())
		return
	}
	if cfg != nil {
		c.logLoaded("server certificates reloaded", cfg)
	}
}

// logLoaded says what cfg serves, and warns of a certificate that is not
// valid now.
func (c *serverCerts) logLoaded(msg string, cfg *tls.Config) {
	subjects := make([]string, len(cfg.Certificates))
	now := time.Now()
	for i, cert := range cfg.Certificates {
		leaf := cert.Leaf
		subjects[i] = leaf.Subject.String()
		if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			c.Log.Warn("a server certificate is not valid now; it is served anyway", "file", c.conf.Certs[i].Cert,
				"not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	c.Log.Info(msg, "subjects", subjects, "client_auth", string(c.conf.ClientAuth))
}

// edgeTLS is the certificates of the TLS listener, which a reload of the
// config may replace with those of other files or settings.
type edgeTLS struct {
	log   *slog.Logger
	watch bool

	cur atomic.Pointer[serverCerts]

	mu        sync.Mutex // one change at a time
	stopWatch func()
}

// newEdgeTLS loads the files of t, and watches them when watch is set.
func newEdgeTLS(t config.ServerTLS, log *slog.Logger, watch bool) (*edgeTLS, error) {
	e := &edgeTLS{log: log, watch: watch}
	c, err := loadServerCerts(t, log)
	if err != nil {
		return nil, err
	}
	e.cur.Store(c)
	e.startWatch(c)
	return e, nil
}

func (e *edgeTLS) startWatch(c *serverCerts) {
	if !e.watch {
		return
	}
	stop, err := c.Watch(c.reload, "watching the server TLS files")
	if err != nil {
		// Not fatal: SIGHUP and the admin API still reload them.
		e.log.Warn("cannot watch the server TLS files; reload with SIGHUP or POST /admin/reload", "error", err.Error())
		return
	}
	e.stopWatch = stop
}

// tlsConfig is the listener's config: every handshake gets the files and
// settings current at that moment.
func (e *edgeTLS) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return e.cur.Load().Current(), nil
		},
	}
}

// reread reads the running files again, as a change of one of them does.
func (e *edgeTLS) reread() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cur.Load().reload()
}

// configure takes the server.tls of a config just reloaded: other files
// or settings than the running ones are loaded and serve the next
// handshakes; files that do not load leave the running ones.
func (e *edgeTLS) configure(t config.ServerTLS) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cur.Load()
	if reflect.DeepEqual(old.conf, t) || len(t.Certs) == 0 {
		// Without certificates the listener is gone from the config,
		// which takes a restart: it serves the running ones till then.
		return
	}
	c, err := loadServerCerts(t, e.log)
	if err != nil {
		e.log.Error("server TLS files refused; the running certificates stay", "error", err.Error())
		return
	}
	if e.stopWatch != nil {
		e.stopWatch()
		e.stopWatch = nil
	}
	e.cur.Store(c)
	c.logLoaded("server certificates replaced", c.Current())
	e.startWatch(c)
}

// stop stops watching the files.
func (e *edgeTLS) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopWatch != nil {
		e.stopWatch()
		e.stopWatch = nil
	}
}
