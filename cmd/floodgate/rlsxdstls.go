package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
)

// xdsCerts is the TLS of the connection to the management server: the
// files of rls.xds.tls, reloaded when one of them changes (tlsSet). A
// rotated client certificate or CA is used from the next connection on.
type xdsCerts struct {
	tlsSet
	files config.RLSXDSTLS
}

// loadXDSCerts reads the files of t; an error names the file at fault.
func loadXDSCerts(t config.RLSXDSTLS, log *slog.Logger) (*xdsCerts, error) {
	c := &xdsCerts{files: t}
	c.tlsSet = tlsSet{
		block: "rls.xds.tls",
		files: []tlsFile{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}},
		build: c.build,
		log:   log,
	}
	if err := c.init(); err != nil {
		return nil, err
	}
	return c, nil
}

// build is the config of one handshake, of the ca, cert and key files'
// contents.
func (c *xdsCerts) build(pem [][]byte) (*tls.Config, error) {
	caPEM, certPEM, keyPEM := pem[0], pem[1], pem[2]
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.files.ServerName}
	if caPEM != nil {
		pool, err := tlsfiles.CertPool(caPEM)
		if err != nil {
			return nil, c.fileError("ca", err)
		}
		cfg.RootCAs = pool
	}
	if certPEM != nil || keyPEM != nil {
		cert, err := tlsfiles.KeyPair(certPEM, keyPEM)
		if err != nil {
			var pe *tlsfiles.PEMError
			if errors.As(err, &pe) && pe.Cert {
				return nil, c.fileError("cert", err)
			}
			return nil, c.fileError("key", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// reload reads the files again; files that do not load leave the running
// set in use, with an ERROR line; the open connection is not touched
// either way.
func (c *xdsCerts) reload() {
	cfg, err := c.tlsSet.reload()
	if err != nil {
		c.log.Error("xDS client TLS files refused; new connections use the running ones", "error", err.Error())
		return
	}
	if cfg == nil {
		return
	}
	args := []any{"ca", c.files.CA != ""}
	if len(cfg.Certificates) > 0 {
		leaf := cfg.Certificates[0].Leaf
		args = append(args, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c.log.Info("xDS client TLS files reloaded", args...)
}

// watch reloads when a file of rls.xds.tls changes.
func (c *xdsCerts) watch() (stop func(), err error) {
	return c.tlsSet.watch(c.reload, "watching the xDS client TLS files")
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
