package rlsserver

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
// files of rls.xds.tls, reloaded when one of them changes (tlsfiles.Set). A
// rotated client certificate or CA is used from the next connection on.
type xdsCerts struct {
	tlsfiles.Set
	files config.RLSXDSTLS
}

// loadXDSCerts reads the files of t; an error names the file at fault.
func loadXDSCerts(t config.RLSXDSTLS, log *slog.Logger) (*xdsCerts, error) {
	c := &xdsCerts{files: t}
	c.Set = tlsfiles.Set{
		Block: "rls.xds.tls",
		Files: []tlsfiles.File{{Key: "ca", Path: t.CA}, {Key: "cert", Path: t.Cert}, {Key: "key", Path: t.Key}},
		Build: c.build,
		Log:   log,
	}
	if err := c.Init(); err != nil {
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
			return nil, c.FileError("ca", err)
		}
		cfg.RootCAs = pool
	}
	if certPEM != nil || keyPEM != nil {
		cert, err := c.KeyPair("cert", "key", certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// reload reads the files again; files that do not load leave the running
// set in use, with an ERROR line; the open connection is not touched
// either way.
func (c *xdsCerts) reload() {
	cfg, err := c.Set.Reload()
	if err != nil {
		c.Log.Error("xDS client TLS files refused; new connections use the running ones", "error", err.Error())
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
	c.Log.Info("xDS client TLS files reloaded", args...)
}

// watch reloads when a file of rls.xds.tls changes.
func (c *xdsCerts) watch() (stop func(), err error) {
	return c.Set.Watch(c.reload, "watching the xDS client TLS files")
}

// creds are the transport credentials of the client connection: gRPC's
// TLS, with the config current at each handshake.
func (c *xdsCerts) creds() credentials.TransportCredentials { return xdsCreds{c} }

type xdsCreds struct{ c *xdsCerts }

func (x xdsCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(x.c.Current()).ClientHandshake(ctx, authority, conn)
}

func (x xdsCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the xDS client's credentials do not serve")
}

func (x xdsCreds) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(x.c.Current()).Info()
}

func (x xdsCreds) Clone() credentials.TransportCredentials { return x }

// OverrideServerName is part of the interface; rls.xds.tls.server_name
// is the way to set the name.
func (x xdsCreds) OverrideServerName(string) error {
	return errors.New("set rls.xds.tls.server_name instead")
}
