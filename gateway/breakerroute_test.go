package gateway

import (
	"strings"
	"testing"
)

// A route whose breaker is open, taken out by a reload and put back by
// the next, finds its breaker open: its upstream is still failing.
func TestBreakerOutlivesItsRoute(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	cfg := strings.Replace(breakerConfig, "timeout: 300ms", "timeout: 10s", 1)
	h := newHarness(t, cfg, up.backend)
	user := map[string]string{"X-User-Id": "u1"}
	up.mode.Store("fail")
	for range 10 {
		drain(h.do("GET", "/coupon", user, nil))
	}
	if st := breakerOf(t, h, "coupon").State; st != "OPEN" {
		t.Fatalf("the breaker is %s after 10 failures, want OPEN", st)
	}
	other := strings.Replace(cfg, "id: coupon", "id: other", 1)
	other = strings.Replace(other, "path: /coupon", "path: /other", 1)
	if err := h.gw.Reload(mustParse(t, strings.Replace(other, "{{UP}}", up.URL, -1))); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.Reload(mustParse(t, strings.Replace(cfg, "{{UP}}", up.URL, -1))); err != nil {
		t.Fatal(err)
	}
	if st := breakerOf(t, h, "coupon").State; st != "OPEN" {
		t.Errorf("the breaker is %s after its route went and came back, want OPEN", st)
	}
}
