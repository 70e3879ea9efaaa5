package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// fakeFleet is a backend on a shared store: fleet is its default scope.
// The gateway's own tests carry fleet actions out on real instances.
type fakeFleet struct {
	*fakeBackend
	fleetCalls []string // by:op:route
	fleetErr   error
}

func (f *fakeFleet) Scope(s string) (gateway.Scope, error) {
	if s == "" {
		return gateway.ScopeFleet, nil
	}
	return gateway.Scope(s), nil
}

func (f *fakeFleet) FleetResetLimit(ctx context.Context, by, route, name string, values []string, fallback bool) error {
	f.fleetCalls = append(f.fleetCalls, by+":reset:"+route)
	return f.fleetErr
}

func (f *fakeFleet) FleetForceBreaker(ctx context.Context, by, route, state string, ttl time.Duration) error {
	if _, ok := ctx.Deadline(); !ok {
		return fmt.Errorf("no deadline")
	}
	f.fleetCalls = append(f.fleetCalls, by+":breaker:"+route)
	if f.fleetErr == nil {
		f.forced = route + "=" + state
	}
	return f.fleetErr
}

func newFleetTest(t *testing.T) (*fakeFleet, http.Handler) {
	b := &fakeFleet{fakeBackend: &fakeBackend{}}
	b.cfg.Store(parseConfig(t, ""))
	return b, NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
}

func TestFleetScopeIsTheDefaultOfASharedStore(t *testing.T) {
	f, h := newFleetTest(t)
	wantJSON(t, do(t, h, "DELETE", "/admin/limits?route=api&limit=user&key=u1"), 200, `{"status":"reset","scope":"fleet"}`)
	wantJSON(t, do(t, h, "POST", "/admin/breakers/coupon?state=open"), 200, `{"status":"ok","route":"coupon","scope":"fleet","state":"OPEN","forced":true}`)
	if got := strings.Join(f.fleetCalls, " "); got != "admin:reset:api admin:breaker:coupon" {
		t.Fatalf("fleet calls %q", got)
	}
	// scope=instance keeps to the instance's own calls.
	wantJSON(t, do(t, h, "DELETE", "/admin/limits?route=api&limit=user&key=u1&scope=instance"), 200, `{"status":"reset","scope":"instance"}`)
	wantJSON(t, do(t, h, "POST", "/admin/breakers/coupon?state=closed&scope=instance"), 200, `{"status":"ok","route":"coupon","scope":"instance","state":"CLOSED","forced":true}`)
	if len(f.fleetCalls) != 2 || len(f.calls) != 1 || f.forced != "coupon=closed" {
		t.Fatalf("fleet calls %q, instance calls %+v, forced %q", f.fleetCalls, f.calls, f.forced)
	}
}

func TestFleetStoreDownIs503(t *testing.T) {
	f, h := newFleetTest(t)
	f.fleetErr = fmt.Errorf("breaker not forced: %w", limit.ErrStoreUnavailable)
	for _, target := range []string{"/admin/breakers/coupon?state=open", "/admin/limits?route=api&limit=user&key=u1"} {
		method := map[bool]string{true: "POST", false: "DELETE"}[strings.Contains(target, "breakers")]
		r := do(t, h, method, target)
		if r.code != 503 || !strings.Contains(r.body, `"store_unavailable"`) {
			t.Errorf("%s %s with the store down: %d %s", method, target, r.code, r.body)
		}
	}
}

func TestBadScope(t *testing.T) {
	_, fleet := newFleetTest(t)
	_, single := newTest(t, "")
	for _, tt := range []struct {
		h      http.Handler
		scope  string
		reason string
	}{
		{fleet, "world", `parameter \"scope\" is \"world\"`},
		{fleet, "FLEET", `parameter \"scope\" is \"FLEET\"`},
		{single, "galaxy", `parameter \"scope\" is \"galaxy\"`},
		{single, "fleet", `acts on itself only`},
	} {
		for _, target := range []string{"/admin/breakers/coupon?state=open&scope=", "/admin/limits?route=api&limit=user&key=u1&scope="} {
			method := map[bool]string{true: "POST", false: "DELETE"}[strings.Contains(target, "breakers")]
			r := do(t, tt.h, method, target+tt.scope)
			if r.code != 400 || !strings.Contains(r.body, tt.reason) {
				t.Errorf("%s %s%s: %d %s, want 400 with %s", method, target, tt.scope, r.code, r.body, tt.reason)
			}
		}
	}
}
