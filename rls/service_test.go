package rls

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

const testRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /health
    unlimited: true
  - key: path
    value: /blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: hour, requests_per_unit: 1, name: free_tier}
      - key: plan
        value: vip
        replaces: [{name: free_tier}]
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// serve runs a Service on store with testRules over real gRPC, and returns
// a client.
func serve(t *testing.T, store limit.Store) rlsv3.RateLimitServiceClient {
	t.Helper()
	rules, err := Parse("edge.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	return serveRules(t, store, rules)
}

func serveRules(t *testing.T, store limit.Store, rules *Rules) rlsv3.RateLimitServiceClient {
	t.Helper()
	return serveImpl(t, New(Options{Store: func() limit.Store { return store }, Rules: rules}))
}

// serveImpl serves impl over real gRPC on loopback and returns a client.
func serveImpl(tb testing.TB, impl rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, impl)
	go srv.Serve(ln)
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc makes a descriptor of key, value pairs.
func desc(kv ...string) *rlsv3ext.RateLimitDescriptor {
	d := &rlsv3ext.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlsv3ext.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*rlsv3ext.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func TestShouldRateLimit(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	over, ok := rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK

	// A key-only rule counts every value apart.
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, ok, over} {
		resp := ask(t, c, "edge", desc("remote_address", "10.0.0.1"))
		st := resp.Statuses[0]
		if resp.OverallCode != want || st.Code != want {
			t.Fatalf("request %d: overall %v, status %v, want %v", i, resp.OverallCode, st.Code, want)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("current limit %v", st.CurrentLimit)
		}
		if rem := max(2-i, 0); st.LimitRemaining != uint32(rem) {
			t.Fatalf("request %d: remaining %d, want %d", i, st.LimitRemaining, rem)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
			t.Fatalf("duration until reset %v", d)
		}
	}
	if resp := ask(t, c, "edge", desc("remote_address", "10.0.0.2")); resp.OverallCode != ok {
		t.Fatal("another address shares the first one's counter")
	}

	// Descriptors without a rule, an unknown domain, an unlimited rule:
	// OK, with no limit reported.
	for _, tc := range []struct {
		domain string
		d      *rlsv3ext.RateLimitDescriptor
	}{
		{"edge", desc("user", "u1")},
		{"edge", desc("path", "/health")},
		{"edge", desc("path", "/other")},
		{"edge", desc("tenant", "t1")}, // stops at a node without a limit
		{"nowhere", desc("remote_address", "10.0.0.1")},
	} {
		for range 5 {
			resp := ask(t, c, tc.domain, tc.d)
			if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("%s %v: %v", tc.domain, tc.d, resp)
			}
		}
	}
}

// A request over one limit consumes nothing from the others, unlike
// envoyproxy/ratelimit, which counts every descriptor it is sent.
func TestOverOneLimitConsumesNoOther(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	login, addr := desc("path", "/login"), desc("remote_address", "10.9.9.9")
	for range 2 {
		ask(t, c, "edge", login)
	}
	resp := ask(t, c, "edge", addr, login)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the login limit: %v", resp)
	}
	if resp := ask(t, c, "edge", addr); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the address limit has %d left after a request the login limit rejected, want 2", resp.Statuses[0].LimitRemaining)
	}
}

// notAsked fails t unless st reports a limit of perUnit that was never
// asked: OK, with its limit and neither a remaining count nor a reset.
func notAsked(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, perUnit uint32) {
	t.Helper()
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != perUnit || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
		t.Fatalf("a limit never asked: %v, want OK, its limit %d, no remaining, no reset", st, perUnit)
	}
}

// wantLeft fails t unless d's limit, asked alone, has n left after it.
func wantLeft(t *testing.T, c rlsv3.RateLimitServiceClient, d *rlsv3ext.RateLimitDescriptor, n uint32, after string) {
	t.Helper()
	if resp := ask(t, c, "edge", d); resp.Statuses[0].LimitRemaining != n {
		t.Fatalf("%v has %d left after %s, want %d", d.GetEntries(), resp.Statuses[0].LimitRemaining, after, n)
	}
}

// Descriptors with their own hits_addend are decided together, each at
// its own hits: all of them admit the request, or none takes anything.
func TestMixedHitsAllOrNothing(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	login, addr := desc("path", "/login"), desc("remote_address", "10.9.9.9")
	for range 2 {
		ask(t, c, "edge", login)
	}
	addr.HitsAddend = wrapperspb.UInt64(2)
	resp := ask(t, c, "edge", login, addr)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].LimitRemaining != 3 {
		t.Fatalf("over the login limit, with 2 hits on the address: %v; want the address reported with its 3 left", resp)
	}
	wantLeft(t, c, desc("remote_address", "10.9.9.9"), 2, "a request the login limit rejected")
	// Admitted: each descriptor takes its own hits.
	other, free := desc("remote_address", "10.8.8.8"), desc("tenant", "t9", "plan", "free")
	other.HitsAddend = wrapperspb.UInt64(2)
	resp = ask(t, c, "edge", other, free)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("2 hits of 3 and 1 of 1: %v", resp)
	}
	// More hits than a limit's count: over at once, and nothing counted,
	// however large (2^64-1 would not fit the store's arithmetic).
	other.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	third := desc("remote_address", "10.7.7.7")
	resp = ask(t, c, "edge", other, third)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits_addend 2^64-1: %v", resp)
	}
	reports(t, resp.Statuses[1], rlsv3.RateLimitResponse_OK, 3, 3)
	wantLeft(t, c, third, 2, "a request with 2^64-1 hits")
}

// On Redis Cluster the store asks the most selective limit first, and
// another slot's limits not at all when it rejects: they are reported as
// not asked, not as a limit with nothing left.
func TestClusterNotAsked(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t, 3)
	s, err := redisstore.New(redisstore.Options{Mode: redisstore.Cluster, Addrs: cl.Addrs()[:1], Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := serve(t, s)
	login, addr := desc("path", "/login"), desc("remote_address", "10.9.9.9")
	for range 2 {
		ask(t, c, "edge", login)
	}
	resp := ask(t, c, "edge", addr, login)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the login limit: %v", resp)
	}
	notAsked(t, resp.Statuses[0], 3)
	wantLeft(t, c, addr, 2, "a request the login limit rejected")
}

func TestShadowReplacesAndHits(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	// shadow_mode: decided and reported, never enforced.
	for i := range 3 {
		resp := ask(t, c, "edge", desc("canary", "x"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow request %d: %v", i, resp)
		}
	}
	// The vip limit replaces free_tier when both match.
	free, vip := desc("tenant", "t1", "plan", "free"), desc("tenant", "t1", "plan", "vip")
	for i := range 3 {
		resp := ask(t, c, "edge", free, vip)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("request %d with free_tier replaced: %v", i, resp)
		}
	}
	if resp := ask(t, c, "edge", free); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("free_tier alone, never counted while replaced: %v", resp)
	}
	// hits_addend: the request's, and a descriptor's own.
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlsv3ext.RateLimitDescriptor{desc("remote_address", "h")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2 of 3: %v %v", resp, err)
	}
	d := desc("remote_address", "h")
	d.HitsAddend = wrapperspb.UInt64(2)
	resp, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*rlsv3ext.RateLimitDescriptor{d}})
	// Rejected, it reports nothing left, as envoyproxy/ratelimit does,
	// though the 1 it had is still there.
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a descriptor's hits_addend 2 with 1 left: %v %v", resp, err)
	}
	// The 1 left is still there: the next request takes it.
	wantLeft(t, c, desc("remote_address", "h"), 0, "a rejected hits_addend of 2")
	if resp := ask(t, c, "edge", desc("remote_address", "h")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a fourth hit of 3: %v", resp)
	}
}

// duration_until_reset is whole seconds, rounded up, as
// envoyproxy/ratelimit sends it: 10.3s into an hour, 3590s.
func TestResetInWholeSeconds(t *testing.T) {
	t.Parallel()
	rules, err := Parse("edge.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000/3600*3600, 0).Add(10300 * time.Millisecond)
	store := memory.New(memory.Options{})
	c := serveImpl(t, New(Options{Store: func() limit.Store { return store }, Rules: rules, Now: func() time.Time { return at }}))
	for i := range 4 {
		st := ask(t, c, "edge", desc("remote_address", "r")).Statuses[0]
		if d := st.GetDurationUntilReset(); d.GetSeconds() != 3590 || d.GetNanos() != 0 {
			t.Fatalf("request %d: duration until reset %v, want 3590s", i, d)
		}
	}
	st := ask(t, c, "edge", desc("path", "/blocked")).Statuses[0]
	if d := st.GetDurationUntilReset(); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || d.GetSeconds() != 1 || d.GetNanos() != 0 {
		t.Fatalf("a limit of 0 a second, 0.3s in: %v, want OVER_LIMIT and 1s until reset", st)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	neg := desc("remote_address", "x")
	neg.IsNegativeHits = true
	many := make([]*rlsv3ext.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("remote_address", fmt.Sprint("10.0.0.", i))
	}
	deep := desc()
	for range MaxEntries + 1 {
		deep.Entries = append(deep.Entries, &rlsv3ext.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlsv3ext.RateLimitDescriptor{desc("a", "b")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptor"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{neg}}, "negative"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, "at most 256"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{desc("a", "b"), deep}}, "descriptor 1: 65 entries: at most 64"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument about %s", tc.req, err, tc.want)
		}
	}
	// A huge value is a key like any other, bounded in the store.
	resp := ask(t, c, "edge", desc("remote_address", strings.Repeat("{}\n", 100_000)))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("huge value: %v", resp)
	}
	// As many descriptors as allowed: decided.
	if resp := ask(t, c, "edge", many[:MaxDescriptors]...); resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != MaxDescriptors {
		t.Fatalf("%d descriptors: %v", MaxDescriptors, resp.OverallCode)
	}
	if resp := ask(t, c, "edge", &rlsv3ext.RateLimitDescriptor{Entries: deep.Entries[:MaxEntries]}); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%d entries: %v", MaxEntries, resp)
	}
}

// Two services on one Redis, as two replicas of the rate-limit service
// behind Envoy: 64 clients admit exactly the limit.
func TestExactOnRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	var clients []rlsv3.RateLimitServiceClient
	for range 2 {
		s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clients = append(clients, serve(t, s))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for range 5 {
				resp, err := clients[g%2].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
					Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{desc("remote_address", "hot"), desc("path", "/login")},
				})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 2 {
		t.Fatalf("admitted %d of 320, want the login limit's 2", admitted.Load())
	}
	// The address limit (3 an hour) took only the 2 admissions.
	if resp := ask(t, clients[0], "edge", desc("remote_address", "hot")); resp.Statuses[0].LimitRemaining != 0 || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("address limit after the run: %v", resp)
	}
	// The most descriptors a request may have, in one script call.
	many := make([]*rlsv3ext.RateLimitDescriptor, MaxDescriptors)
	for i := range many {
		many[i] = desc("remote_address", fmt.Sprint("10.1.0.", i))
	}
	if resp := ask(t, clients[1], "edge", many...); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[MaxDescriptors-1].LimitRemaining != 2 {
		t.Fatalf("%d descriptors on Redis: %v", MaxDescriptors, resp.OverallCode)
	}
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := serve(t, s)
	ask(t, c, "edge", desc("remote_address", "a"))
	srv.Stop()
	_, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{desc("remote_address", "a")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("with Redis down: %v, want Unavailable", err)
	}
	// Descriptors that match no limit need no store.
	if resp := ask(t, c, "edge", desc("path", "/health")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unlimited with Redis down: %v", resp)
	}
	// A check needs it.
	check := desc("remote_address", "a")
	check.HitsAddend = wrapperspb.UInt64(0)
	_, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{check}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a check with Redis down: %v, want Unavailable", err)
	}
	// A request rejected before the store call is rejected still; its
	// other limits are reported without what they have left.
	resp := ask(t, c, "edge", check, desc("path", "/blocked"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("requests_per_unit 0 with Redis down: %v", resp)
	}
	notAsked(t, resp.Statuses[0], 3)
}

// The shipped example's rules load.
func TestExampleRules(t *testing.T) {
	t.Parallel()
	r, err := LoadDir("../examples/rls/rules")
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Match("edge", []Entry{{"path", "/login"}, {"remote_address", "10.0.0.1"}}); l == nil || l.RequestsPerUnit != 5 {
		t.Fatalf("login limit: %+v", l)
	}
}

// requests_per_unit 0 rejects every request, and the request's other
// limits consume nothing for it.
func TestBlocked(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	addr := desc("remote_address", "10.1.1.1")
	for range 3 {
		resp := ask(t, c, "edge", addr, desc("path", "/blocked"))
		st := resp.Statuses[1]
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
			st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("blocked path: %v", resp)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Second {
			t.Fatalf("duration until reset %v", d)
		}
	}
	if resp := ask(t, c, "edge", addr); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the address limit has %d left after 3 blocked requests and 1 admitted, want 2", resp.Statuses[0].LimitRemaining)
	}
}

// redisStore is a store on a redis-server of its own.
func redisStore(t *testing.T) limit.Store {
	t.Helper()
	srv := testredis.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eachStore runs f on the memory store and on Redis.
func eachStore(t *testing.T, f func(t *testing.T, s limit.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, memory.New(memory.Options{})) })
	t.Run("redis", func(t *testing.T) { f(t, redisStore(t)) })
}

// reports fails t unless st has code and reports its limit of perUnit an
// hour with left remaining and a reset within the hour.
func reports(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, perUnit, left uint32) {
	t.Helper()
	if st.Code != code || st.CurrentLimit.GetRequestsPerUnit() != perUnit || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.LimitRemaining != left {
		t.Fatalf("status %v, want %v, a limit of %d an hour, %d remaining", st, code, perUnit, left)
	}
	if d := st.DurationUntilReset.AsDuration(); st.DurationUntilReset == nil || d <= 0 || d > time.Hour {
		t.Fatalf("status %v: duration until reset %v, want one within the hour", st, d)
	}
}

// A descriptor's hits_addend set to 0 (a wrapper, so set and absent
// differ) checks its limit and counts nothing, as envoyproxy/ratelimit
// reads it: OK while the limit has some left, OVER_LIMIT once it is used
// up. The request's own hits_addend of 0 still means 1.
func TestCheckOnly(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		c := serve(t, s)
		ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
		checkOnly := func(kv ...string) *rlsv3ext.RateLimitDescriptor {
			d := desc(kv...)
			d.HitsAddend = wrapperspb.UInt64(0)
			return d
		}
		for range 4 {
			resp := ask(t, c, "edge", checkOnly("remote_address", "c1"))
			if resp.OverallCode != ok {
				t.Fatalf("a check within the limit: %v", resp)
			}
			reports(t, resp.Statuses[0], ok, 3, 3)
		}
		for range 3 {
			ask(t, c, "edge", desc("remote_address", "c1"))
		}
		resp := ask(t, c, "edge", checkOnly("remote_address", "c1"))
		if resp.OverallCode != over {
			t.Fatalf("a check of a used-up limit: %v", resp)
		}
		reports(t, resp.Statuses[0], over, 3, 0)

		// Over, it rejects the request, which counts nothing elsewhere.
		other := desc("remote_address", "c2")
		resp = ask(t, c, "edge", other, checkOnly("remote_address", "c1"))
		if resp.OverallCode != over {
			t.Fatalf("with a check of a used-up limit: %v", resp)
		}
		reports(t, resp.Statuses[0], ok, 3, 3)
		reports(t, resp.Statuses[1], over, 3, 0)
		wantLeft(t, c, other, 2, "a request a check rejected")

		// Within its limit, it admits the request, which counts elsewhere.
		resp = ask(t, c, "edge", checkOnly("remote_address", "c3"), other)
		if resp.OverallCode != ok {
			t.Fatalf("with a check within the limit: %v", resp)
		}
		reports(t, resp.Statuses[0], ok, 3, 3)
		reports(t, resp.Statuses[1], ok, 3, 1)
		wantLeft(t, c, desc("remote_address", "c3"), 2, "checks")
	})
}

// A request rejected before the store is asked, by a requests_per_unit
// of 0 or by more hits than a limit's count, reports its other limits as
// a rejection by the store does: with what they have left and when they
// reset. Nothing is consumed.
func TestRejectedReportsEveryLimit(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		c := serve(t, s)
		ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
		up := desc("remote_address", "h7")
		ask(t, c, "edge", up)
		big := desc("remote_address", "h8")
		big.HitsAddend = wrapperspb.UInt64(4)
		for _, rejecting := range []*rlsv3ext.RateLimitDescriptor{desc("path", "/blocked"), big} {
			resp := ask(t, c, "edge", up, rejecting)
			if resp.OverallCode != over || resp.Statuses[1].Code != over {
				t.Fatalf("rejected by %v: %v", rejecting.GetEntries(), resp)
			}
			reports(t, resp.Statuses[0], ok, 3, 2)
		}
		// The limit that rejects reports nothing left, as
		// envoyproxy/ratelimit does, though its 3 are untouched.
		resp := ask(t, c, "edge", up, big)
		reports(t, resp.Statuses[1], over, 3, 0)
		wantLeft(t, c, desc("remote_address", "h8"), 2, "4 hits rejected")

		// The store's own rejection reads the same.
		login := desc("path", "/login")
		for range 2 {
			ask(t, c, "edge", login)
		}
		resp = ask(t, c, "edge", up, login)
		if resp.OverallCode != over {
			t.Fatalf("over the login limit: %v", resp)
		}
		if _, onRedis := s.(*redisstore.Store); onRedis {
			// Unless the Redis store knew the login limit to be used
			// up (local rejects): then it asked Redis nothing, and the
			// other limit is reported as one Redis Cluster left
			// undecided, without what it has left.
			if st := resp.Statuses[0]; st.Code != ok || st.LimitRemaining != 0 || st.DurationUntilReset != nil || st.CurrentLimit.GetRequestsPerUnit() != 3 {
				t.Fatalf("status %v, want OK, a limit of 3 an hour, nothing about what is left", st)
			}
		} else {
			reports(t, resp.Statuses[0], ok, 3, 2)
		}
		wantLeft(t, c, up, 1, "rejected requests")
	})
}

// An unlimited descriptor reports math.MaxUint32 remaining, as
// envoyproxy/ratelimit does, and no limit.
func TestUnlimitedRemaining(t *testing.T) {
	t.Parallel()
	c := serve(t, memory.New(memory.Options{}))
	for _, ds := range [][]*rlsv3ext.RateLimitDescriptor{
		{desc("path", "/health")},
		{desc("path", "/health"), desc("remote_address", "u1")},
		{desc("path", "/health"), desc("path", "/blocked")},
	} {
		st := ask(t, c, "edge", ds...).Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil || st.DurationUntilReset != nil {
			t.Fatalf("unlimited: %v, want OK, %d remaining, no limit", st, uint32(math.MaxUint32))
		}
	}
}

// A flood of requests over a limit on Redis is answered from the store's
// memory of exhausted keys: OVER_LIMIT every time, and Redis is asked
// once for the admission that used the limit up, not once a request.
func TestOverLimitFloodSkipsRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := serve(t, s)
	login := desc("path", "/login")
	for range 2 {
		ask(t, c, "edge", login)
	}
	srv.Do(t, "CONFIG", "RESETSTAT")
	for range 50 {
		if resp := ask(t, c, "edge", login); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("over the login limit: %v", resp)
		}
	}
	stats := srv.Do(t, "INFO", "commandstats")
	if strings.Contains(stats, "cmdstat_evalsha") || strings.Contains(stats, "cmdstat_eval:") {
		t.Fatalf("Redis was asked while the limit was known used up:\n%s", stats)
	}
}

// withLimit is d with its own limit of n a unit.
func withLimit(d *rlsv3ext.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit) *rlsv3ext.RateLimitDescriptor {
	d.Limit = &rlsv3ext.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	return d
}

// A descriptor's own limit applies instead of the rule it matches, as in
// envoyproxy/ratelimit, and counts apart from that rule.
func TestLimitOverride(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		c := serve(t, s)
		ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
		for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
			st := ask(t, c, "edge", withLimit(desc("remote_address", "o1"), 2, typev3.RateLimitUnit_HOUR)).Statuses[0]
			if st.Code != want || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
				st.LimitRemaining != uint32(max(1-i, 0)) || st.DurationUntilReset.GetSeconds() < 1 || st.DurationUntilReset.GetSeconds() > 3600 {
				t.Fatalf("request %d with a limit of 2 an hour: %v, want %v", i, st, want)
			}
		}
		// The rule's own count (3 an hour, the same unit) was not
		// touched.
		wantLeft(t, c, desc("remote_address", "o1"), 2, "two requests under an override")
		// Another count with the same unit keeps the override's counter.
		if st := ask(t, c, "edge", withLimit(desc("remote_address", "o1"), 5, typev3.RateLimitUnit_HOUR)).Statuses[0]; st.Code != ok || st.LimitRemaining != 2 {
			t.Fatalf("a limit of 5 an hour after 2 counted: %v, want OK and 2 left", st)
		}
		// An unlimited descriptor is limited by its override.
		health := func() *rlsv3ext.RateLimitDescriptor {
			return withLimit(desc("path", "/health"), 1, typev3.RateLimitUnit_HOUR)
		}
		ask(t, c, "edge", health())
		if resp := ask(t, c, "edge", health()); resp.OverallCode != over {
			t.Fatalf("an unlimited descriptor over its override: %v", resp)
		}
		// A descriptor no rule matches is limited too; 0 rejects all.
		if resp := ask(t, c, "edge", withLimit(desc("nothing", "x"), 0, typev3.RateLimitUnit_SECOND)); resp.OverallCode != over {
			t.Fatalf("an override of 0: %v", resp)
		}
		// An unknown domain has no limits, override or not.
		if resp := ask(t, c, "elsewhere", withLimit(desc("remote_address", "o1"), 0, typev3.RateLimitUnit_SECOND)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("an override in an unknown domain: %v", resp)
		}
		for _, bad := range []*rlsv3ext.RateLimitDescriptor{
			withLimit(desc("remote_address", "o2"), 1, typev3.RateLimitUnit_UNKNOWN),
			withLimit(desc("remote_address", "o2"), limit.MaxCount+1, typev3.RateLimitUnit_HOUR),
			func() *rlsv3ext.RateLimitDescriptor {
				d := withLimit(desc("remote_address", "o2"), 1, typev3.RateLimitUnit_HOUR)
				d.Limit.UnitMultiplier = wrapperspb.UInt32(30)
				return d
			}(),
		} {
			_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{bad}})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("override %v: %v, want InvalidArgument", bad.Limit, err)
			}
		}
	})
}
