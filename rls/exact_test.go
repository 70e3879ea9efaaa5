package rls

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// exactRules use every newer key, each limit an hour so that one window
// holds the whole test (a crossing of the hour is detected and retried).
const exactRules = `
domain: exact
descriptors:
  - key: path
    value: /api/*/items
    rate_limit: {unit: hour, requests_per_unit: 37}
  - key: file
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 41}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 29}
  - key: route
    value: api
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 23}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// exactCounter is one counter of exactRules: the descriptors that take
// from it (sent in turn), the hits of each request, and what the counter
// must admit in requests.
type exactCounter struct {
	name  string
	descs []*rlsv3ext.RateLimitDescriptor
	hits  uint32
	want  int
}

func exactCounters() []exactCounter {
	override := desc("user", "u1")
	override.Limit = &rlsv3ext.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 31, Unit: typev3.RateLimitUnit_HOUR}
	wild := desc("path", "/api/v2/items")
	wild.HitsAddend = wrapperspb.UInt64(3)
	return []exactCounter{
		// 37 hits an hour at 3 a request: 12 requests, and the 1 hit
		// left admits no request of 3.
		{name: "wildcard with hits_addend 3", descs: []*rlsv3ext.RateLimitDescriptor{wild}, hits: 3, want: 12},
		{name: "share_threshold", descs: []*rlsv3ext.RateLimitDescriptor{
			desc("file", "files/a"), desc("file", "files/b"), desc("file", "files/c"), desc("file", "files/d")}, hits: 1, want: 41},
		{name: "detailed_metric", descs: []*rlsv3ext.RateLimitDescriptor{desc("tenant", "t1")}, hits: 1, want: 29},
		{name: "value_to_metric", descs: []*rlsv3ext.RateLimitDescriptor{desc("route", "api", "method", "GET")}, hits: 1, want: 23},
		{name: "descriptor limit", descs: []*rlsv3ext.RateLimitDescriptor{override}, hits: 1, want: 31},
	}
}

// 64 concurrent streams over 4 connections ask one service in a real
// Redis, and in a Redis Cluster of 3 masters, for more than every limit:
// each counter admits exactly its limit, no more and no fewer.
func TestExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	rules, err := Parse("exact.yaml", []byte(exactRules))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) limit.Store
	}{
		{"redis", func(t *testing.T) limit.Store {
			srv := testredis.Start(t)
			s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"cluster", func(t *testing.T) limit.Store {
			cl := testredis.StartCluster(t, 3)
			s, err := redisstore.New(redisstore.Options{Mode: redisstore.Cluster, Addrs: cl.Addrs()[:1], Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				// A fresh store each attempt: fresh counters.
				if exactRound(t, tc.store(t), rules) {
					return
				}
				if attempt == 1 {
					t.Fatal("the hour rolled over during two rounds")
				}
			}
		})
	}
}

// exactRound runs one round; false when the hour rolled over during it,
// which leaves the counts of two windows.
func exactRound(t *testing.T, store limit.Store, rules *Rules) bool {
	svc := New(Options{Store: func() limit.Store { return store }, Rules: rules})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(ln)
	defer srv.Stop()
	var clients []rlsv3.RateLimitServiceClient
	for range 4 {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}

	counters := exactCounters()
	const workers = 64
	// Each counter is asked 3 times its limit, spread over every worker.
	start := time.Now().Truncate(time.Hour)
	ok := make([][]int, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		ok[w] = make([]int, len(counters))
		wg.Go(func() {
			c := clients[w%len(clients)]
			for i, ctr := range counters {
				for n := w; n < 3*ctr.want; n += workers {
					d := ctr.descs[n%len(ctr.descs)]
					resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "exact", Descriptors: []*rlsv3ext.RateLimitDescriptor{d}})
					if err != nil {
						errs <- err
						return
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						ok[w][i]++
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !time.Now().Truncate(time.Hour).Equal(start) {
		return false
	}
	for i, ctr := range counters {
		got := 0
		for w := range workers {
			got += ok[w][i]
		}
		if got != ctr.want {
			t.Errorf("%s: %d requests of %d hits admitted, want exactly %d", ctr.name, got, ctr.hits, ctr.want)
		}
	}
	return true
}
