package rls

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// shareRules use every key envoyproxy/ratelimit reads in a descriptor.
const shareRules = `
domain: share
descriptors:
  # Every file under files/ takes from one budget of 4 an hour.
  - key: files
    value: files/*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 4}
  # An exact value is its own rule, with its own counter.
  - key: files
    value: files/special
    rate_limit: {unit: hour, requests_per_unit: 1}
  # The same wildcard without share_threshold: a counter a value.
  - key: files_no_share
    value: files_no_share/*
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 4}
  # A '*' in the middle, shared, with a nested limit a user: the
  # organisations acme-eu-1, acme-us-2 ... share one counter per user.
  - key: org
    value: acme-*-*
    share_threshold: true
    descriptors:
      - key: user
        value_to_metric: true
        metadata: {backend: primary, weight: 3}
        rate_limit: {unit: hour, requests_per_unit: 2}
`

func TestShareThreshold(t *testing.T) {
	t.Parallel()
	rules := mustParse(t, shareRules)
	eachStore(t, func(t *testing.T, s limit.Store) {
		c := serveRules(t, s, rules)
		for i, v := range []string{"files/a.pdf", "files/b.csv", "files/a.pdf", "files/c/d.txt"} {
			reports(t, ask(t, c, "share", desc("files", v)).Statuses[0], rlsv3.RateLimitResponse_OK, 4, uint32(3-i))
		}
		// The shared budget is used up, for every value under files/ and
		// the pattern as a value alike.
		for _, v := range []string{"files/new", "files/a.pdf", "files/*"} {
			reports(t, ask(t, c, "share", desc("files", v)).Statuses[0], rlsv3.RateLimitResponse_OVER_LIMIT, 4, 0)
		}
		reports(t, ask(t, c, "share", desc("files", "files/special")).Statuses[0], rlsv3.RateLimitResponse_OK, 1, 0)

		// Without share_threshold each value counts alone.
		for i := range 6 {
			v := fmt.Sprintf("files_no_share/%d", i)
			reports(t, ask(t, c, "share", desc("files_no_share", v)).Statuses[0], rlsv3.RateLimitResponse_OK, 4, 3)
		}

		// Shared at the organisation, apart by user.
		reports(t, ask(t, c, "share", desc("org", "acme-eu-1", "user", "u")).Statuses[0], rlsv3.RateLimitResponse_OK, 2, 1)
		reports(t, ask(t, c, "share", desc("org", "acme-us-2", "user", "u")).Statuses[0], rlsv3.RateLimitResponse_OK, 2, 0)
		reports(t, ask(t, c, "share", desc("org", "acme-x-y", "user", "u")).Statuses[0], rlsv3.RateLimitResponse_OVER_LIMIT, 2, 0)
		reports(t, ask(t, c, "share", desc("org", "acme-eu-1", "user", "v")).Statuses[0], rlsv3.RateLimitResponse_OK, 2, 1)
		if resp := ask(t, c, "share", desc("org", "acme-eu", "user", "u")); resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("acme-eu matched acme-*-*: %v", resp)
		}
	})
}

// The keys that change only statistics or what a client is sent are kept
// on the limit, level by level.
func TestKeptKeys(t *testing.T) {
	t.Parallel()
	r := mustParse(t, shareRules)
	l := r.Match("share", e("org", "acme-a-b", "user", "u"))
	if l == nil {
		t.Fatal("no limit")
	}
	want := []Level{{Key: "org", Value: "acme-*-*", ShareThreshold: true}, {Key: "user", ValueToMetric: true}}
	if len(l.Path) != len(want) || l.Path[0] != want[0] || l.Path[1] != want[1] {
		t.Errorf("Path = %+v, want %+v", l.Path, want)
	}
	if l.QuotaMode || l.DetailedMetric || fmt.Sprint(l.Metadata) != "map[backend:primary weight:3]" {
		t.Errorf("QuotaMode %v, DetailedMetric %v, Metadata %v", l.QuotaMode, l.DetailedMetric, l.Metadata)
	}
	if got := l.CounterValue(0, "acme-a-b"); got != "acme-*-*" {
		t.Errorf("CounterValue(0) = %q, want the shared pattern", got)
	}
	if got := l.CounterValue(1, "u"); got != "u" {
		t.Errorf("CounterValue(1) = %q, want the value", got)
	}
	f := r.Match("share", e("files", "files/x"))
	if f == nil || !f.DetailedMetric || f.QuotaMode || f.Metadata != nil || len(f.Path) != 1 || !f.Path[0].ShareThreshold {
		t.Errorf("files/x: %+v", f)
	}
	if n := r.Match("share", e("files_no_share", "files_no_share/x")); n == nil || !n.Path[0].ValueToMetric || n.CounterValue(0, "files_no_share/x") != "files_no_share/x" {
		t.Errorf("files_no_share/x: %+v", n)
	}
}

// 64 streams over two services on one Redis, on values that share one
// counter and on a user below a shared wildcard: exactly the limit is
// admitted.
func TestShareExactOnRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	rules := mustParse(t, shareRules)
	var clients []rlsv3.RateLimitServiceClient
	for range 2 {
		s, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clients = append(clients, serveRules(t, s, rules))
	}
	var files, orgs atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 5 {
				for _, q := range []struct {
					d *rlsv3ext.RateLimitDescriptor
					n *atomic.Int64
				}{
					{desc("files", fmt.Sprintf("files/%d-%d", g, i)), &files},
					{desc("org", fmt.Sprintf("acme-%d-%d", g, i), "user", "u"), &orgs},
				} {
					resp, err := clients[g%2].ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
						Domain: "share", Descriptors: []*rlsv3ext.RateLimitDescriptor{q.d},
					})
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						q.n.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if files.Load() != 4 || orgs.Load() != 2 {
		t.Fatalf("admitted %d files and %d org requests of 320 each, want 4 and 2", files.Load(), orgs.Load())
	}
}

// The rule files docs/rls.md shows load, and its share_threshold example
// shares as it says.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("unterminated yaml block: %q", part)
		}
		// The Envoy config of "Moving from envoyproxy/ratelimit" is
		// YAML too, but not a rule file.
		if strings.HasPrefix(block, "domain:") {
			blocks = append(blocks, block)
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("%d rule files in docs/rls.md, want 2", len(blocks))
	}
	for _, b := range blocks {
		mustParse(t, b)
	}
	r := mustParse(t, blocks[1])
	a, b := r.Match("files", e("org", "acme-eu", "user", "u")), r.Match("files", e("org", "acme-us", "user", "u"))
	if a == nil || a != b || a.RequestsPerUnit != 20 || a.CounterValue(0, "acme-eu") != "acme-*" || a.CounterValue(1, "u") != "u" {
		t.Errorf("org example: %+v, %+v", a, b)
	}
	if l := r.Match("files", e("path", "files/special")); l == nil || l.RequestsPerUnit != 10 || l.CounterValue(0, "files/special") != "files/special" {
		t.Errorf("files/special: %+v", l)
	}
}
