package upstream

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/h1"
)

// Upstream is a route's targets and the client that reaches them.
type Upstream struct {
	route       string
	targets     []*url.URL
	names       []string  // of the targets, for the logs: targetNames
	state       []*Target // per target: health, ejection, requests in flight (health.go)
	least       bool      // balance least_request (over one target too, for the in_flight of the routes' view)
	ejection    config.Eject
	health      config.Health
	next        atomic.Uint64
	client      Client
	protocol    config.Protocol
	http2       bool        // upstream.protocol h2c or h2
	tls         *tls.Config // of the https targets (TLS), for the health checks too
	tlsID       string
	stripPrefix string
	ridHeader   string        // canonical: the request id's, which the gateway sets
	idle        time.Duration // longest silence while a response body streams
	send        time.Duration // longest a write of the body to the client may stall (server.send_timeout)
	upgrades    *Upgrades     // the gateway's joined connections
	now         func() time.Time
}

// Options are what New needs besides the route's upstream settings.
type Options struct {
	// Route is the route's id, as the logs and the health view name it.
	Route string
	// Client reaches the targets; routes and reloads with the same
	// settings share one (ClientID), so that idle connections survive.
	Client Client
	// TLS and TLSID are the upstream's TLS (the TLS function's), which
	// the health checks speak too.
	TLS   *tls.Config
	TLSID string
	// Targets are the states of the route's targets, from the gateway's
	// Registry, which keeps them across reloads.
	Targets []*Target
	// RequestIDHeader is the canonical name of the field the gateway sets
	// the request id in: a client's Connection field cannot strip it.
	RequestIDHeader string
	// SendTimeout bounds each write of an answer's body to the client
	// (server.send_timeout); zero: none.
	SendTimeout time.Duration
	// Upgrades holds the gateway's joined connections.
	Upgrades *Upgrades
	// Now is the gateway's clock.
	Now func() time.Time
}

// New returns the upstream of a route with settings c.
func New(c config.Upstream, o Options) *Upstream {
	return &Upstream{
		route:       o.Route,
		targets:     c.Targets,
		names:       targetNames(c.Targets),
		state:       o.Targets,
		least:       c.Balance == config.BalanceLeastRequest,
		ejection:    c.Eject,
		health:      c.Health,
		client:      o.Client,
		tls:         o.TLS,
		tlsID:       o.TLSID,
		protocol:    c.Protocol,
		http2:       c.Protocol.HTTP2(),
		stripPrefix: c.StripPrefix,
		ridHeader:   o.RequestIDHeader,
		idle:        c.IdleTimeout,
		send:        o.SendTimeout,
		upgrades:    o.Upgrades,
		now:         o.Now,
	}
}

// HTTP2 reports an upstream of protocol h2c or h2.
func (u *Upstream) HTTP2() bool { return u.http2 }

// Client is the client the upstream's exchanges go through.
func (u *Upstream) Client() Client { return u.client }

// Client sends one exchange to a target and returns the answer, as
// h1.Client.Do does: h1.Client for upstream.protocol http1, h2Client for
// h2c and h2.
type Client interface {
	Do(req *http.Request, idle time.Duration, interim h1.Interim) (*http.Response, error)
	CloseIdle()
}

// ClientID names the client of upstream settings c with TLS tlsID: the
// routes and reloads whose settings have the same id share one client.
func ClientID(c config.Upstream, tlsID string) string {
	return fmt.Sprint(c.Protocol, c.ConnectTimeout, c.Timeout, tlsID)
}

// NewClient returns a client for upstream settings c, speaking tlsc to
// https targets.
func NewClient(c config.Upstream, tlsc *tls.Config) Client {
	switch c.Protocol {
	case config.ProtocolH2C:
		return newH2Client(c.ConnectTimeout, c.Timeout, nil)
	case config.ProtocolH2:
		return newH2Client(c.ConnectTimeout, c.Timeout, tlsc)
	}
	return h1.New(h1.Options{ConnectTimeout: c.ConnectTimeout, HeaderTimeout: c.Timeout,
		Fallback: newTransport(transportOptions{connectTimeout: c.ConnectTimeout, timeout: c.Timeout, tls: tlsc})})
}

// transportOptions configure the http.Transport a route's client falls back to.
type transportOptions struct {
	connectTimeout time.Duration
	timeout        time.Duration // until the response headers
	tls            *tls.Config   // of https targets
}

func newTransport(o transportOptions) *http.Transport {
	d := &net.Dialer{Timeout: o.connectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       o.tls,
		ResponseHeaderTimeout: o.timeout,
		// A gateway holds one connection per concurrent request to each
		// target; the default of two idle connections per host would close
		// and redial under any real load.
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		// Bodies pass through as they are: the client negotiated the
		// encoding with the upstream, not with us.
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
	}
}

// targetNames are how logs name targets: scheme://host, without a
// target's path or any userinfo.
func targetNames(ts []*url.URL) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Scheme + "://" + t.Host
	}
	return names
}

// HasToken reports whether the list fields values hold token, in any case.
func HasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// Path is the path the gateway sends to target for a request whose
// cleaned (escaped) path is path: strip removed at a segment boundary, then
// appended to the target's own path. It returns the path in both of the
// forms a url.URL holds: decoded, and escaped as it goes on the wire.
// `floodgate events replay` uses it too, so a replayed request goes where
// the original would have.
func Path(target *url.URL, strip, path string) (decoded, escaped string) {
	if strip = strings.TrimSuffix(strip, "/"); strip != "" {
		if rest, ok := strings.CutPrefix(path, strip); ok {
			switch {
			case rest == "":
				path = "/"
			case rest[0] == '/':
				path = rest
			}
		}
	}
	escaped = path
	if base := strings.TrimSuffix(target.EscapedPath(), "/"); base != "" {
		escaped = base + path
		if path == "/" {
			escaped = base
		}
	}
	decoded = escaped
	if d, err := url.PathUnescape(escaped); err == nil {
		decoded = d
	}
	return decoded, escaped
}
