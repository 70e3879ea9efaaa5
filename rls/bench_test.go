package rls

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// okServer answers every ShouldRateLimit with OK and decides nothing: the
// cost of gRPC alone, the baseline the service is measured against.
type okServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

const benchRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// BenchmarkShouldRateLimit sends ShouldRateLimit calls with two
// descriptors (an address drawn from 100,000 and a path) from 64
// goroutines over one gRPC connection on loopback, as an Envoy would, to
// a do-nothing server and to the service on each store, and on the memory
// store with its metrics registered. Limits are sized
// to admit everything.
func BenchmarkShouldRateLimit(b *testing.B) {
	rules, err := Parse("edge.yaml", []byte(benchRules))
	if err != nil {
		b.Fatal(err)
	}
	srv := testredis.Start(b)
	rs, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	mem := memory.New(memory.Options{})
	for _, tc := range []struct {
		name string
		impl rlsv3.RateLimitServiceServer
	}{
		{"grpc-only", okServer{}},
		{"memory", New(Options{Store: func() limit.Store { return mem }, Rules: rules})},
		{"redis", New(Options{Store: func() limit.Store { return rs }, Rules: rules})},
		// As floodgate runs it: with the descriptor metrics.
		{"memory-metrics", New(Options{Store: func() limit.Store { return mem }, Rules: rules, Registerer: prometheus.NewRegistry()})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := serveImpl(b, tc.impl)
			var n atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
						desc("remote_address", "10.0."+strconv.FormatInt(i%100_000, 10)), desc("path", "/api/coupons"),
					}})
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
				}
			})
		})
	}
}

// benchRuleFile is a rule file of 200 tenants, each with an exact path,
// a wildcard and a key-only limit beneath it, sharing a rate_limit through
// an alias: about 1,000 descriptors, as a large deployment writes them.
func benchRuleFile() []byte {
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: &rl {unit: second, requests_per_unit: 100}\n")
	for i := range 200 {
		fmt.Fprintf(&b, `  - key: tenant
    value: t%d
    descriptors:
      - key: path
        value: /api/v1/users
        rate_limit: {unit: minute, requests_per_unit: %d, name: t%d_users}
      - key: path
        value: /api/*
        rate_limit:
          unit: second
          requests_per_unit: 50
          replaces: [{name: t%d_users}]
      - key: path
        rate_limit: *rl
        shadow_mode: true
`, i, i+1, i, i)
	}
	return []byte(b.String())
}

// BenchmarkParse reads a rule file of about 1,000 descriptors, as a
// reload does.
func BenchmarkParse(b *testing.B) {
	data := benchRuleFile()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
