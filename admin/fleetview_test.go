package admin

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// fakeViewer is a backend that lists its fleet. The gateway's tests and
// those of floodgate serve read real fleets.
type fakeViewer struct {
	*fakeBackend
	fleet gateway.Fleet
	err   error
}

func (f *fakeViewer) Fleet(ctx context.Context) (gateway.Fleet, error) {
	if _, ok := ctx.Deadline(); !ok {
		return gateway.Fleet{}, fmt.Errorf("no deadline")
	}
	return f.fleet, f.err
}

func TestFleetEndpoint(t *testing.T) {
	b := &fakeViewer{fakeBackend: &fakeBackend{}}
	b.cfg.Store(parseConfig(t, "tok"))
	b.fleet.Instances = []gateway.Instance{{ID: "a-", Self: true, Version: "v1", Config: "c1", Store: "ok"}, {ID: "b-", Version: "v1", Config: "c2", Store: "failing"}}
	b.fleet.Agree.Version, b.fleet.Agree.Overrides, b.fleet.Disagreeing, b.fleet.Skipped = true, true, []string{"b-"}, 2
	h := NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if r := do(t, h, "GET", "/admin/fleet"); r.code != 401 {
		t.Fatalf("without the token: %d %s", r.code, r.body)
	}
	auth := []string{"Authorization", "Bearer tok"}
	wantJSON(t, do(t, h, "GET", "/admin/fleet", auth...), 200, `{"instances":[
		{"id":"a-","self":true,"version":"v1","config":"c1","overrides_version":null,"store":"ok","started":"0001-01-01T00:00:00Z","uptime_seconds":0,"last_seen":"0001-01-01T00:00:00Z"},
		{"id":"b-","version":"v1","config":"c2","overrides_version":null,"store":"failing","started":"0001-01-01T00:00:00Z","uptime_seconds":0,"last_seen":"0001-01-01T00:00:00Z"}],
		"agree":{"config":false,"version":true,"overrides":true},"disagreeing":["b-"],"skipped":2}`)
	if r := do(t, h, "POST", "/admin/fleet", auth...); r.code != 405 {
		t.Fatalf("POST: %d", r.code)
	}
	if r := do(t, h, "GET", "/dashboard.json"); !strings.Contains(r.body, `"fleet":{"instances":2,"disagreeing":["b-"]}`) {
		t.Fatalf("dashboard: %s", r.body)
	}

	b.err = fmt.Errorf("instances: %w", limit.ErrStoreUnavailable)
	if r := do(t, h, "GET", "/admin/fleet", auth...); r.code != 503 || !strings.Contains(r.body, `"store_unavailable"`) {
		t.Fatalf("store down: %d %s", r.code, r.body)
	}
	// The dashboard draws the rest without the fleet.
	if r := do(t, h, "GET", "/dashboard.json"); r.code != 200 || strings.Contains(r.body, `"fleet"`) {
		t.Fatalf("dashboard with the store down: %d %s", r.code, r.body)
	}
}

func TestFleetEndpointWithoutAFleet(t *testing.T) {
	_, h := newTest(t, "")
	if r := do(t, h, "GET", "/admin/fleet"); r.code != 501 || !strings.Contains(r.body, `"not_implemented"`) {
		t.Fatalf("%d %s", r.code, r.body)
	}
}
