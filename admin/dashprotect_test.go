package admin

import (
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate-gw/floodgate/gateway"
)

// protectBackend is a backend with protected routes, whose protection the
// test changes while the sampler may read it.
type protectBackend struct {
	*fakeBackend
	ps atomic.Pointer[[]gateway.ProtectStatus]
}

func (b *protectBackend) Protected() []gateway.ProtectStatus {
	if ps := b.ps.Load(); ps != nil {
		return *ps
	}
	return nil
}

// A protected route's charts: its limit and what this instance admits
// now (lower during a warm-up, or its share of a fleet's limit), the
// requests that reached the upstream, and those protection turned away,
// per second; a protected route without traffic yet has its limit drawn.
// A route without protection has none of it.
func TestDashboardProtection(t *testing.T) {
	pb := &protectBackend{}
	f := newHistoryFixtureOf(t, func(fb *fakeBackend) Backend { pb.fakeBackend = fb; return pb })
	pb.ps.Store(&[]gateway.ProtectStatus{
		{Route: "api", Limit: 80, Admitting: 40, Baseline: .05, Min: 1, Max: 80, Instances: 2},
		{Route: "idle", Limit: 1e9, Admitting: 1e9, Min: 1},
	})
	// api's fleet of two holds 80/s, and this instance admits its share.
	f.protLimit.WithLabelValues("api").Set(80)
	f.protAdmitting.WithLabelValues("api").Set(40)
	f.protLimit.WithLabelValues("idle").Set(1e9)
	f.protAdmitting.WithLabelValues("idle").Set(1e9)
	f.step()
	// In 2 s, 100 answers on api: 20 429s of the user limit; 20 503s,
	// 6 of the open breaker and 14 of protection; the 60 others are the
	// upstream's, forwarded: 30/s, within this instance's share of 40/s.
	add := func(n float64, code string) { f.requests.WithLabelValues("api", code).Add(n) }
	add(60, "200")
	add(20, "429")
	add(20, "503")
	f.limited.WithLabelValues("api", "user").Add(20)
	f.refused.WithLabelValues("api").Add(6)
	f.protRefused.WithLabelValues("api").Add(14)
	f.requests.WithLabelValues("open", "200").Add(10)
	f.step()

	d := f.poll("?route=api&route=open&route=idle")
	const i = 1
	api := d.History.Series["api"].Protect
	if api == nil {
		t.Fatalf("api's series have no protection: %+v", d.History.Series["api"])
	}
	near(t, "limit", api.Limit[i], 80)
	near(t, "admitting", api.Admitting[i], 40)
	near(t, "forwarded/s", api.Forwarded[i], 30)
	near(t, "turned away/s", api.Refused[i], 7)
	if api.Limit[0] == nil || api.Forwarded[0] == nil || *api.Forwarded[0] != 0 {
		t.Errorf("the quiet interval before the traffic: limit %v, forwarded %v, want 80 and 0", api.Limit[0], api.Forwarded[0])
	}
	idle := d.History.Series["idle"].Protect
	if idle == nil {
		t.Fatal("a protected route without traffic has no series")
	}
	near(t, "idle's limit, none learned yet", idle.Limit[i], 1e9)
	near(t, "idle's forwarded/s", idle.Forwarded[i], 0)
	if d.History.Series["open"].Protect != nil {
		t.Error("a route without protection has a protection series")
	}
	views := map[string]*protectView{}
	for _, r := range d.Routes {
		views[r.Route] = r.Protect
	}
	if v := views["api"]; v == nil || *v != (protectView{Limit: 80, Admitting: 40, Baseline: .05, Min: 1, Max: 80, Instances: 2}) {
		t.Errorf("api's protection now = %+v", v)
	}
	if v := views["open"]; v != nil {
		t.Errorf("open's protection = %+v, want none", v)
	}

	// A reload takes api's protection away: its series goes with it.
	f.protLimit.DeleteLabelValues("api")
	f.protAdmitting.DeleteLabelValues("api")
	f.protRefused.DeleteLabelValues("api")
	pb.ps.Store(&[]gateway.ProtectStatus{{Route: "idle", Limit: 1e9, Admitting: 1e9, Min: 1}})
	add(10, "200")
	f.step()
	if d = f.poll("?route=api"); d.History.Series["api"].Protect != nil {
		t.Error("a route whose protection a reload removed still has its series")
	}
}

// Without a protected route, the answer says nothing of protection, even
// from a backend that could protect.
func TestDashboardWithoutProtection(t *testing.T) {
	pb := &protectBackend{}
	f := newHistoryFixtureOf(t, func(fb *fakeBackend) Backend { pb.fakeBackend = fb; return pb })
	for range 3 {
		f.requests.WithLabelValues("api", "200").Add(10)
		f.step()
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9090/dashboard.json?route=api&route=open", nil))
	if w.Code != 200 || strings.Contains(w.Body.String(), "protect") {
		t.Errorf("dashboard.json without protection: %d %s", w.Code, w.Body)
	}
}
