package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// checker runs the active checks of one target: a GET of the health
// path (or a gRPC Health/Check) every interval, on a connection of its own each time, so that a
// check says whether the target accepts connections now, not whether an
// old one still stands.
type checker struct {
	settings config.Health
	protocol config.Protocol    // the upstream's: what the checks speak
	tlsID    string             // the upstream's TLS (TLS), which the checks speak too
	cancel   context.CancelFunc // ends the checks, and a check under way
	done     chan struct{}
}

// checkClient makes the checks' requests. Redirects are not followed: a
// 3xx passes.
var checkClient = newCheckClient(nil)

// checkClientH2C and checkClientH2 check the targets of upstream.protocol
// h2c and h2, which may speak nothing but HTTP/2.
var checkClientH2C, checkClientH2 = newCheckClient(protocols((*http.Protocols).SetUnencryptedHTTP2)),
	newCheckClient(protocols((*http.Protocols).SetHTTP2))

func protocols(set func(*http.Protocols, bool)) *http.Protocols {
	p := new(http.Protocols)
	set(p, true)
	return p
}

func newCheckClient(p *http.Protocols) *http.Client {
	return newCheckClientTLS(p, nil)
}

// newCheckClientTLS is newCheckClient speaking tlsc to https targets (nil:
// the system's roots).
func newCheckClientTLS(p *http.Protocols, tlsc *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig: tlsc,
			// No proxy from the environment: a check asks the target itself.
			Proxy:              nil,
			DialContext:        (&net.Dialer{}).DialContext,
			DisableKeepAlives:  true,
			DisableCompression: true,
			ForceAttemptHTTP2:  false,
			Protocols:          p,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// checkClientFor is the client that checks targets of protocol p, with
// the TLS of an upstream.tls block (tlsID not empty).
func checkClientFor(p config.Protocol, tlsc *tls.Config, tlsID string) *http.Client {
	if tlsID != "" {
		var ps *http.Protocols
		switch p {
		case config.ProtocolH2C:
			return checkClientH2C // in clear: tls does not apply
		case config.ProtocolH2:
			ps = protocols((*http.Protocols).SetHTTP2)
		}
		return newCheckClientTLS(ps, tlsc)
	}
	switch p {
	case config.ProtocolH2C:
		return checkClientH2C
	case config.ProtocolH2:
		return checkClientH2
	}
	return checkClient
}

// start runs t's checks with h until the checker is stopped. The first
// check is made at once.
func (hr *Registry) start(t *Target, h config.Health, u *Upstream) *checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &checker{settings: h, protocol: u.protocol, tlsID: u.tlsID, cancel: cancel, done: make(chan struct{})}
	client := checkClientFor(u.protocol, u.tls, u.tlsID)
	base := &url.URL{Scheme: t.target.Scheme, Host: t.target.Host}
	ref, err := url.Parse(h.Path)
	if err != nil {
		ref = &url.URL{Path: h.Path} // validation keeps this from happening
	}
	target := base.ResolveReference(ref).String()
	do := func(ctx context.Context) (bool, string) { return check(ctx, client, target, h.Timeout) }
	if h.GRPCService != nil {
		target = (&url.URL{Scheme: base.Scheme, Host: base.Host, Path: grpcHealthPath}).String()
		req := grpcHealthRequest(*h.GRPCService)
		do = func(ctx context.Context) (bool, string) { return checkGRPC(ctx, client, target, req, h.Timeout) }
	}
	hr.running.Add(1)
	hr.n.Add(1)
	go func() {
		// Counted out before stop returns.
		defer close(c.done)
		defer hr.running.Done()
		defer hr.n.Add(-1)
		tick := time.NewTicker(h.Interval)
		defer tick.Stop()
		for {
			ok, what := do(ctx)
			if ctx.Err() != nil {
				return
			}
			t.checked(h, ok, what, hr.now())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// stop ends the checks and waits for the checker's goroutine.
func (c *checker) stop() {
	c.cancel()
	<-c.done
}

// check makes one check: whether it passed (2xx or 3xx), and what it got
// ("200", "503", or what failed).
func check(ctx context.Context, client *http.Client, target string, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "floodgate-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return false, checkFailure(ctx, err, timeout)
	}
	// Read a little of the body, so that a target that answers while
	// it writes is not cut off mid-answer, and no more.
	io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400, strconv.Itoa(resp.StatusCode)
}

// grpcHealthPath is the gRPC health check's method.
const grpcHealthPath = "/grpc.health.v1.Health/Check"

// grpcHealthRequest is the body of a gRPC check of service: a
// HealthCheckRequest in a gRPC message's frame (not compressed, and its
// length).
func grpcHealthRequest(service string) []byte {
	msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		panic(err) // a string field: cannot fail
	}
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// checkGRPC makes one gRPC check: whether the target answered grpc-status
// 0 with SERVING, and what it got ("SERVING", "NOT_SERVING",
// "grpc-status 12: unknown service", "415", or what failed).
func checkGRPC(ctx context.Context, client *http.Client, target string, body []byte, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "floodgate-health-check")
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		return false, checkFailure(ctx, err, timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.CopyN(io.Discard, resp.Body, 4<<10)
		return false, strconv.Itoa(resp.StatusCode)
	}
	// One message, a HealthCheckResponse of a few bytes.
	msg, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return false, checkFailure(ctx, err, timeout)
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status") // trailers only
	}
	if st != "0" {
		if st == "" {
			return false, "no grpc-status"
		}
		m := resp.Trailer.Get("Grpc-Message")
		if m == "" {
			m = resp.Header.Get("Grpc-Message")
		}
		if m, err := url.PathUnescape(m); err == nil && m != "" {
			return false, "grpc-status " + st + ": " + m[:min(len(m), 128)]
		}
		return false, "grpc-status " + st
	}
	if len(msg) < 5 || msg[0] != 0 || int(binary.BigEndian.Uint32(msg[1:5])) != len(msg)-5 {
		return false, "not one HealthCheckResponse message"
	}
	var hr healthpb.HealthCheckResponse
	if err := proto.Unmarshal(msg[5:], &hr); err != nil {
		return false, "malformed HealthCheckResponse: " + err.Error()
	}
	return hr.Status == healthpb.HealthCheckResponse_SERVING, hr.Status.String()
}

// checkFailure says why a check's exchange failed.
func checkFailure(ctx context.Context, err error, timeout time.Duration) string {
	if ctx.Err() == context.DeadlineExceeded {
		return "timeout after " + timeout.String()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
