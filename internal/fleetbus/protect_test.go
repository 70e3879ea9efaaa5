package fleetbus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// Each instance reads the others' latest reports, with their age; one
// that stops reporting is dropped after the ttl, one that leaves at once.
func TestProtectReports(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	a, b := open(t, srv), open(t, srv)
	ctx := context.Background()
	if got, err := a.ProtectReport(ctx, "coupon", "a", "p1 one", time.Second); err != nil || len(got) != 0 {
		t.Fatalf("first report: %v, %v; want no others", got, err)
	}
	got, err := b.ProtectReport(ctx, "coupon", "b", "p1 two", time.Second)
	if err != nil || len(got) != 1 || got[0].Instance != "a" || got[0].Report != "p1 one" || got[0].Age < 0 || got[0].Age > time.Second {
		t.Fatalf("b reads %+v, %v; want a's report", got, err)
	}
	if got, err := a.ProtectRead(ctx, "coupon", "c", time.Second); err != nil || len(got) != 2 {
		t.Fatalf("c reads %+v, %v; want a's and b's", got, err)
	}
	// A report from far in the future (not an instance's: written by
	// hand) is dropped rather than kept forever.
	if n := srv.Do(t, "HSET", "fg:{protect/coupon}:fleet", "evil", "99999999999999 p1 x"); n != "1" {
		t.Fatalf("HSET: %s, want a new field of the route's hash", n)
	}
	if got, err := a.ProtectRead(ctx, "coupon", "c", time.Second); err != nil || len(got) != 2 {
		t.Fatalf("with a report from the future: %+v, %v; want a's and b's only", got, err)
	}
	if n := srv.Do(t, "HEXISTS", "fg:{protect/coupon}:fleet", "evil"); n != "0" {
		t.Errorf("the report from the future is still there")
	}
	// Another route's reports are apart.
	if got, err := a.ProtectReport(ctx, "other", "a", "p1 x", time.Second); err != nil || len(got) != 0 {
		t.Fatalf("other route: %v, %v", got, err)
	}
	// a stops: after the ttl, b no longer reads it, and its field is gone.
	b.SetOffset(1500 * time.Millisecond)
	if got, err := b.ProtectReport(ctx, "coupon", "b", "p1 two", time.Second); err != nil || len(got) != 0 {
		t.Fatalf("after a's ttl: %+v, %v; want none", got, err)
	}
	b.SetOffset(0)
	if _, err := a.ProtectReport(ctx, "coupon", "a", "p1 one", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.ProtectLeave(ctx, "coupon", "a"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ProtectReport(ctx, "coupon", "b", "p1 two", time.Second); err != nil || len(got) != 0 {
		t.Fatalf("after a left (c only read): %+v, %v; want none", got, err)
	}
	var keys []string
	for _, k := range srv.Keys(t) {
		if strings.Contains(k, "{protect/") {
			keys = append(keys, k)
		}
	}
	if len(keys) != 2 || !strings.HasSuffix(keys[0], "}:fleet") {
		t.Errorf("keys %v: want one hash per route", keys)
	}
	srv.CheckExpiry(t)
}

// A Redis that does not answer is an error that wraps
// limit.ErrStoreUnavailable, and says so.
func TestProtectReportUnavailable(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	b := open(t, srv)
	srv.Stop()
	_, err := b.ProtectReport(context.Background(), "coupon", "a", "p1", time.Second)
	if err == nil || !strings.HasPrefix(err.Error(), "redisstore: protect") {
		t.Fatalf("error %v: want a redisstore: protect error", err)
	}
}

// On a Redis Cluster a route's reports are one key, in one slot.
func TestProtectReportsCluster(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t, 3)
	a, b := openCluster(t, cl), openCluster(t, cl)
	ctx := context.Background()
	if _, err := a.ProtectReport(ctx, "coupon", "a", "p1 one", time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := b.ProtectReport(ctx, "coupon", "b", "p1 two", time.Second)
	if err != nil || len(got) != 1 || got[0].Report != "p1 one" {
		t.Fatalf("b reads %+v, %v; want a's report", got, err)
	}
}
