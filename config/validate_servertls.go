package config

import (
	"fmt"
	"time"
)

// serverTLS checks server.listen_tls and server.tls: a listener and its
// certificates come together, each certificate with its key, PEM,
// matching; a client CA exactly when clients are asked for certificates.
// The files are read here so that check refuses what serve could not
// load.
func (v *validator) serverTLS(c *Config) {
	s := &c.Server
	t := &s.TLS
	if s.ListenTLS != "" {
		v.addr("server.listen_tls", s.ListenTLS, false)
		if len(t.Certs) == 0 {
			v.errorf("server.listen_tls", "set, but server.tls.certs is empty: give the certificate the listener presents")
		}
	} else if len(t.Certs) > 0 {
		v.errorf("server.tls.certs", "set, but server.listen_tls is empty, so no listener would present them")
	}
	if s.H2C && s.Listen == "" {
		v.errorf("server.h2c", "set, but server.listen is empty, so no listener would speak it")
	}
	for i, cert := range t.Certs {
		p := fmt.Sprintf("server.tls.certs[%d]", i)
		if cert.Cert == "" && cert.Key == "" {
			v.errorf(p, "needs cert and key: a certificate the listener presents")
		}
		v.halfPair(p, cert.Cert, cert.Key)
		v.keyPair(p, cert.Cert, cert.Key, "clients that check it will refuse it")
	}
	switch t.MinVersion {
	case TLS12, TLS13:
	case "1.0", "1.1", "1":
		v.errorf("server.tls.min_version", "%q: TLS %s is not offered; write 1.2 or 1.3", t.MinVersion, t.MinVersion)
	default:
		v.errorf("server.tls.min_version", "%q: write 1.2 or 1.3", t.MinVersion)
	}
	switch t.ClientAuth {
	case ClientAuthNone:
		if t.ClientCA != "" {
			v.errorf("server.tls.client_ca", "set, but server.tls.client_auth is none, so no client is asked for a certificate: "+
				"set client_auth to request or require, or leave client_ca out")
		}
	case ClientAuthRequest, ClientAuthRequire:
		if t.ClientCA == "" {
			v.errorf("server.tls.client_auth", "%s needs server.tls.client_ca, the certificates that sign client certificates", t.ClientAuth)
		} else if s.ListenTLS == "" {
			v.errorf("server.tls.client_auth", "%s, but server.listen_tls is empty, so no client is asked", t.ClientAuth)
		}
	default:
		v.errorf("server.tls.client_auth", "%q: none, request or require", t.ClientAuth)
	}
	v.certPool("server.tls.client_ca", t.ClientCA)
}

// http2 checks server.http2 against what HTTP/2 allows (RFC 9113 §6.5.2).
func (v *validator) http2(h *HTTP2) {
	const p = "server.http2."
	if h.MaxConcurrentStreams < 1 || h.MaxConcurrentStreams > 10000 {
		v.errorf(p+"max_concurrent_streams", "%d is outside 1..10000", h.MaxConcurrentStreams)
	}
	if h.MaxReadFrameSize < 1<<14 || h.MaxReadFrameSize > 1<<24-1 {
		v.errorf(p+"max_read_frame_size", "%d is outside 16384..16777215", h.MaxReadFrameSize)
	}
	if h.MaxHeaderListSize < 0 {
		v.errorf(p+"max_header_list_size", "%d is negative (0 means server.max_header_bytes)", h.MaxHeaderListSize)
	}
	if h.InitialStreamWindow < 1 || h.InitialStreamWindow > 1<<31-1 {
		v.errorf(p+"initial_stream_window", "%d is outside 1..2147483647", h.InitialStreamWindow)
	}
	if h.InitialConnWindow < 1<<16-1 || h.InitialConnWindow > 1<<31-1 {
		v.errorf(p+"initial_conn_window", "%d is outside 65535..2147483647", h.InitialConnWindow)
	}
}

// tlsParts refuses tls:subject key parts in a config whose listener asks
// no client for a certificate, at the line of each: the part would be
// missing on every request.
func (v *validator) tlsParts(c *Config) {
	if c.Server.ListenTLS != "" && c.Server.TLS.ClientAuth != ClientAuthNone {
		return
	}
	limits := func(ls []*Limit, p string) {
		for i, l := range ls {
			for _, list := range []struct {
				name  string
				parts []KeyPart
			}{{"key", l.Key}, {"fallback", l.Fallback}} {
				for j, k := range list.parts {
					if k.Source == SourceTLS {
						v.errorf(fmt.Sprintf("%s[%d].%s[%d]", p, i, list.name, j),
							"%s needs server.listen_tls with server.tls.client_auth request or require: no client is asked for a certificate", k)
					}
				}
			}
		}
	}
	limits(c.GlobalLimits, "global_limits")
	for i, r := range c.Routes {
		limits(r.Limits, fmt.Sprintf("routes[%d].limits", i))
	}
}

// validity warns of a certificate that is not valid now: it is served
// anyway, and what clients make of it is expired.
func (v *validator) validity(p, path string, notBefore, notAfter time.Time, expired string) {
	now := time.Now()
	switch {
	case now.After(notAfter):
		v.warnf(p, "%q expired at %s; %s", path, notAfter.UTC().Format(time.RFC3339), expired)
	case now.Before(notBefore):
		v.warnf(p, "%q is not valid before %s; %s", path, notBefore.UTC().Format(time.RFC3339), expired)
	}
}
