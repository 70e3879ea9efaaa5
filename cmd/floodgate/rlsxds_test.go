package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate-gw/floodgate/internal/rlsserver"
)

// controlPlane is a go-control-plane snapshot server on addr, serving
// RateLimitConfigs to node "floodgate" and keeping every NACK it hears.
type controlPlane struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache
	srv   *grpc.Server

	mu    sync.Mutex
	nacks []string // "VERSION: message", VERSION the one the client keeps
}

func startControlPlane(t *testing.T, addr string, cache cachev3.SnapshotCache, opts ...grpc.ServerOption) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, addr: addr, cache: cache}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			cp.mu.Lock()
			cp.nacks = append(cp.nacks, req.GetVersionInfo()+": "+d.GetMessage())
			cp.mu.Unlock()
		}
		return nil
	}}
	cp.srv = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.srv, serverv3.NewServer(context.Background(), cache, cb))
	go cp.srv.Serve(ln)
	t.Cleanup(cp.srv.Stop)
	return cp
}

func (cp *controlPlane) push(version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[string][]types.Resource{rlsserver.ConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), "floodgate", snap); err != nil {
		cp.t.Fatal(err)
	}
}

func (cp *controlPlane) nacked() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

// edgeConfig limits each remote_address of domain edge to n an hour; unit
// overrides the unit.
func edgeConfig(n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}},
	}}
}

// With rls.xds, the rules come from a management server: each snapshot
// is applied whole, a broken one is NACKed and the running rules stay,
// and a server that goes away leaves them in place, says so on /readyz,
// and is reconnected to when it is back.
func TestServeRLSXDS(t *testing.T) {
	t.Parallel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cp := startControlPlane(t, "127.0.0.1:0", cache)
	cp.push("1", edgeConfig(1, rlsconfv3.RateLimitUnit_HOUR))

	f := newFixture(t, nil)
	rlsAddr := freeAddr(t)
	const cfg = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
rls:
  listen: "{{RLS}}"
  xds: {addr: "{{CP}}", node_id: {{NODE}}}
`
	f.write(strings.NewReplacer("{{RLS}}", rlsAddr, "{{CP}}", cp.addr, "{{NODE}}", "floodgate").Replace(cfg))
	check := startProc(t, "check", "-c", f.file)
	if code := check.wait(); code != exitOK {
		t.Fatalf("check exited %d", code)
	}
	if want := f.file + ": rls: rules from xDS " + cp.addr + ", node floodgate\n"; !strings.HasSuffix(check.stdout.String(), want) {
		t.Errorf("check printed %q, want it to end with %q", check.stdout.String(), want)
	}
	p := f.serve()
	c := rlsv3.NewRateLimitServiceClient(dialPlain(t, rlsAddr))
	ask := func(addr string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
			{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	detail := p.readyzDetail

	p.waitLog(`rate-limit rules from xDS applied.*"version":"1"`)
	if ask("a") != rlsv3.RateLimitResponse_OK || ask("a") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("1 an hour did not admit one and refuse the next")
	}
	if d := detail(); d != "" {
		t.Errorf("/readyz detail %q with the rules applied", d)
	}

	// 11 an hour: the counter of "a" stays (1 used), 10 more fit.
	cp.push("2", edgeConfig(11, rlsconfv3.RateLimitUnit_HOUR))
	p.waitLog(`rate-limit rules from xDS applied.*"version":"2"`)
	for i := range 10 {
		if ask("a") != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d under the pushed limit refused", i)
		}
	}
	if ask("a") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the 12th request under 11 an hour admitted")
	}

	// A unit the enum does not name: refused, NACKed at version 2.
	cp.push("3", edgeConfig(1, 9))
	p.waitLog(`rate-limit rules from xDS refused.*"version":"3".*edge: descriptors\[0\]\.rate_limit\.unit: unknown unit \\"9\\"`)
	p.waitFor("the NACK of version 3", func() bool {
		for _, n := range cp.nacked() {
			if strings.HasPrefix(n, "2: ") && strings.Contains(n, `unknown unit "9"`) {
				return true
			}
		}
		return false
	})
	if d := detail(); !strings.Contains(d, `rls.xds: version "3" refused`) {
		t.Errorf("/readyz detail %q after a refused version", d)
	}
	for i := range 11 {
		if ask("b") != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d refused: the refused config replaced the running rules", i)
		}
	}
	if ask("b") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the 12th request under the running 11 an hour admitted")
	}

	// The server goes away: the rules stay, and /readyz says so.
	cp.srv.Stop()
	p.waitFor("/readyz to say the stream ended", func() bool {
		return strings.Contains(detail(), "rls.xds: the stream to "+cp.addr+" ended")
	})
	p.waitLog(`the xDS stream ended; the running rules stay`)
	for i := range 11 {
		if ask("c") != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d refused with the server gone", i)
		}
	}
	if ask("c") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the 12th request with the server gone admitted: the rules were dropped")
	}

	// Back on the same address, with 2 a minute: reconnected and applied.
	cp2 := startControlPlane(t, cp.addr, cache)
	cp2.push("4", edgeConfig(2, rlsconfv3.RateLimitUnit_MINUTE))
	p.waitLog(`rate-limit rules from xDS applied.*"version":"4"`)
	p.waitFor("/readyz to be clear", func() bool { return detail() == "" })
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		got = append(got, ask("d"))
	}
	if want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}; !slices.Equal(got, want) {
		t.Fatalf("2 a minute after the reconnection: %v, want %v", got, want)
	}

	// The subscription is made at start: a reload that changes it says
	// so, and the rules stay the server's.
	f.write(strings.NewReplacer("{{RLS}}", rlsAddr, "{{CP}}", cp.addr, "{{NODE}}", "elsewhere").Replace(cfg))
	p.waitLog(`"level":"WARN","msg":"a listener setting changed; it takes effect after a restart","setting":"rls.xds"`)
	got = got[:0]
	for range 3 {
		got = append(got, ask("e"))
	}
	if want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}; !slices.Equal(got, want) {
		t.Fatalf("2 a minute after a reload of rls.xds: %v, want %v", got, want)
	}
}
