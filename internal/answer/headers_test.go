package answer

import (
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

func TestReported(t *testing.T) {
	rule := &limit.Rule{Name: "r"}
	d := func(remaining, of int64) limit.Decision {
		return limit.Decision{Rule: rule, Allowed: true, Remaining: remaining, Limit: of}
	}
	all := func(int) bool { return true }
	for _, tc := range []struct {
		name       string
		ds         []limit.Decision
		rejectedBy int
		reportable func(int) bool
		want       int
	}{
		{"smallest share", []limit.Decision{d(50, 100), d(3, 10), d(9, 10)}, -1, all, 1},
		{"the first on a tie", []limit.Decision{d(5, 10), d(50, 100), d(1, 2)}, -1, all, 0},
		{"not reportable", []limit.Decision{d(5, 10), d(90, 100)}, -1, func(i int) bool { return i != 0 }, 1},
		{"none reportable", []limit.Decision{d(5, 10)}, -1, func(int) bool { return false }, -1},
		{"never asked", []limit.Decision{{Rule: rule, Allowed: true, Limit: 10, Undecided: true}, d(9, 10)}, -1, all, 1},
		{"the rejecting one", []limit.Decision{d(0, 10), d(5, 10)}, 1, all, 1},
		{"the rejecting one, not reportable", []limit.Decision{d(0, 10), d(5, 10)}, 1, func(i int) bool { return i != 1 }, -1},
	} {
		if got := Reported(tc.ds, tc.rejectedBy, tc.reportable); got != tc.want {
			t.Errorf("%s: Reported = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	rule, shadow := &limit.Rule{Name: "r"}, &limit.Rule{Name: "s", Shadow: true}
	ds := []limit.Decision{
		{Rule: rule, Allowed: false, RetryAfter: 2 * time.Second},
		{Rule: rule, Allowed: true, RetryAfter: time.Minute},
		{Rule: shadow, Allowed: false, RetryAfter: time.Hour},
		{Rule: rule, Allowed: false, RetryAfter: 7 * time.Second},
	}
	if got := RetryAfter(ds); got != 7*time.Second {
		t.Fatalf("RetryAfter = %v, want the longest wait of the limits that rejected, shadow aside: 7s", got)
	}
}

func TestRateLimitHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Ratelimit": true, "Ratelimit-Policy": true, "RateLimit-Reset": true, "ratelimit-remaining": true,
		"X-Ratelimit-Limit": true, "x-ratelimit-used": true, "X-RateLimit": true,
		"Ratelimiter": false, "X-Ratelimiting": false, "X-Rate-Limit-Limit": false, "Rate": false,
		"X-": false, "Retry-After": false, "X-Request-Id": false,
	} {
		if got := rateLimitHeader(name); got != want {
			t.Errorf("rateLimitHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRemoveHeaders(t *testing.T) {
	h := http.Header{
		"Ratelimit": {"a"}, "Ratelimit-Policy": {"b"}, "X-Ratelimit-Remaining": {"c"}, "x-ratelimit-used": {"d"},
		"Link": {"</a>"}, "Retry-After": {"5"}, "X-Ratelimiting": {"e"},
	}
	RemoveHeaders(h)
	want := http.Header{"Link": {"</a>"}, "Retry-After": {"5"}, "X-Ratelimiting": {"e"}}
	if !maps.EqualFunc(h, want, slices.Equal) {
		t.Errorf("RemoveHeaders left %v, want %v", h, want)
	}
}
