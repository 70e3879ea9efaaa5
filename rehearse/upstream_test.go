package rehearse

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

func newTestUpstream(t *testing.T, cfg UpstreamConfig) *Upstream {
	t.Helper()
	u, err := NewUpstream(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestUpstreamCapacity(t *testing.T) {
	t.Parallel()
	u := newTestUpstream(t, UpstreamConfig{
		Latency: 200 * time.Millisecond, Capacity: 10, OverloadLatency: 3 * time.Second,
	})
	// 20 requests in the first second: 10 served normally, 5 slow, 5
	// failing slowly.
	for i := 1; i <= 20; i++ {
		a := u.Decide(t0.Add(time.Duration(i) * 40 * time.Millisecond))
		want := Answer{Status: 200, Delay: 200 * time.Millisecond, Reason: ReasonOK}
		switch {
		case i > 15:
			want = Answer{Status: 503, Delay: 3 * time.Second, Reason: ReasonOverload}
		case i > 10:
			want = Answer{Status: 200, Delay: 3 * time.Second, Reason: ReasonSlow}
		}
		if a != want {
			t.Errorf("request %d in the window: %+v, want %+v", i, a, want)
		}
	}
	s := u.Stats(t0.Add(999 * time.Millisecond))
	if s.Requests != 20 || s.Status[200] != 15 || s.Status[503] != 5 || !s.Overloaded || s.Rate != 0 {
		t.Errorf("stats in the first second: %+v", s)
	}
	// A new window starts fresh, and reports the last one's rate.
	if a := u.Decide(t0.Add(1500 * time.Millisecond)); a.Reason != ReasonOK {
		t.Errorf("first request of the next window: %+v, want ok", a)
	}
	s = u.Stats(t0.Add(1600 * time.Millisecond))
	if s.Rate != 20 || s.Overloaded {
		t.Errorf("stats in the second window: rate %d overloaded %v, want 20 and false", s.Rate, s.Overloaded)
	}
	if s.LastSecond.P50 != 200 || s.LastSecond.P99 != 3000 {
		t.Errorf("last second's added latency %+v, want p50 200 and p99 3000 ms", s.LastSecond)
	}
	// After a quiet second, the last full second saw nothing.
	if s := u.Stats(t0.Add(3500 * time.Millisecond)); s.Rate != 0 || s.LastSecond.P99 != 0 {
		t.Errorf("rate after a quiet second: %d (p99 %v), want 0", s.Rate, s.LastSecond.P99)
	}
	if s.Latency.P50 != 200 || s.Latency.P99 != 3000 {
		t.Errorf("added latency p50 %v p99 %v, want 200 and 3000 ms", s.Latency.P50, s.Latency.P99)
	}
}

func TestUpstreamOutage(t *testing.T) {
	t.Parallel()
	u := newTestUpstream(t, UpstreamConfig{
		Latency: 50 * time.Millisecond, FailAfter: 5 * time.Second, RecoverAfter: 3 * time.Second,
	})
	for _, tt := range []struct {
		at     time.Duration
		want   Answer
		outage bool
	}{
		{4999 * time.Millisecond, Answer{200, 50 * time.Millisecond, ReasonOK}, false},
		{5 * time.Second, Answer{503, 0, ReasonOutage}, true},
		{7999 * time.Millisecond, Answer{503, 0, ReasonOutage}, true},
		{8 * time.Second, Answer{200, 50 * time.Millisecond, ReasonOK}, false},
	} {
		if a := u.Decide(t0.Add(tt.at)); a != tt.want {
			t.Errorf("at %v: %+v, want %+v", tt.at, a, tt.want)
		}
		if s := u.Stats(t0.Add(tt.at)); s.Outage != tt.outage {
			t.Errorf("at %v: stats outage %v, want %v", tt.at, s.Outage, tt.outage)
		}
	}
	forever := newTestUpstream(t, UpstreamConfig{FailAfter: time.Second})
	if a := forever.Decide(t0.Add(time.Hour)); a.Reason != ReasonOutage {
		t.Errorf("an outage with no recover-after an hour in: %+v, want outage", a)
	}
}

// Outage turns an outage on and off whenever the caller says, scripted
// or not.
func TestUpstreamOutageSwitch(t *testing.T) {
	t.Parallel()
	u := newTestUpstream(t, UpstreamConfig{Latency: 50 * time.Millisecond})
	ok := Answer{200, 50 * time.Millisecond, ReasonOK}
	for _, tt := range []struct {
		on   bool
		want Answer
	}{{true, Answer{503, 0, ReasonOutage}}, {false, ok}} {
		u.Outage(tt.on)
		for _, at := range []time.Duration{0, time.Hour} {
			if a := u.Decide(t0.Add(at)); a != tt.want {
				t.Errorf("outage %v, at %v: %+v, want %+v", tt.on, at, a, tt.want)
			}
			if s := u.Stats(t0.Add(at)); s.Outage != tt.on {
				t.Errorf("outage %v, at %v: stats outage %v", tt.on, at, s.Outage)
			}
		}
	}
}

func TestUpstreamErrorsAndJitter(t *testing.T) {
	t.Parallel()
	all := newTestUpstream(t, UpstreamConfig{ErrorRate: 1, Status: 201})
	if a := all.Decide(t0); a.Status != 500 || a.Reason != ReasonError {
		t.Errorf("error rate 1: %+v, want a 500", a)
	}
	u := newTestUpstream(t, UpstreamConfig{
		Latency: 100 * time.Millisecond, Jitter: 20 * time.Millisecond, ErrorRate: 0.1, Status: 202, Seed: 3,
	})
	errs := 0
	lo, hi := time.Hour, time.Duration(0)
	for i := range 10000 {
		a := u.Decide(t0.Add(time.Duration(i) * time.Millisecond))
		switch a.Status {
		case 500:
			errs++
		case 202:
		default:
			t.Fatalf("status %d", a.Status)
		}
		lo, hi = min(lo, a.Delay), max(hi, a.Delay)
	}
	if errs < 850 || errs > 1150 {
		t.Errorf("error rate 0.1: %d errors in 10000", errs)
	}
	if lo < 80*time.Millisecond || hi > 120*time.Millisecond || hi-lo < 35*time.Millisecond {
		t.Errorf("latency 100ms ± 20ms: delays from %v to %v", lo, hi)
	}
	// Jitter never makes a delay negative.
	z := newTestUpstream(t, UpstreamConfig{Jitter: time.Second})
	for range 100 {
		if a := z.Decide(t0); a.Delay < 0 {
			t.Fatalf("negative delay %v", a.Delay)
		}
	}
}

func TestUpstreamConfigValidate(t *testing.T) {
	t.Parallel()
	err := UpstreamConfig{
		Latency: -1, ErrorRate: 1.5, Capacity: -3, RecoverAfter: time.Second, Status: 99,
	}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"latency -1ns", "error-rate 1.5", "capacity -3", "recover-after needs fail-after", "status 99"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if _, err := NewUpstream(UpstreamConfig{ErrorRate: -1}, t0); err == nil {
		t.Error("NewUpstream accepted error rate -1")
	}
}

func TestUpstreamHTTP(t *testing.T) {
	t.Parallel()
	u, err := NewUpstream(UpstreamConfig{Latency: 20 * time.Millisecond, Body: `{"coupon":"ok"}`}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(u)
	defer srv.Close()
	for range 3 {
		start := time.Now()
		resp, err := srv.Client().Post(srv.URL+"/api/coupons", "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != `{"coupon":"ok"}` ||
			resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Upstream-Reason") != "ok" {
			t.Errorf("answer %d %q %v", resp.StatusCode, body, resp.Header)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("answered in %v, before the 20ms latency", d)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s["requests"] != 3.0 || s["status"].(map[string]any)["200"] != 3.0 || s["outage"] != false {
		t.Errorf("/stats = %v", s)
	}
	if lat := s["latency_ms"].(map[string]any); lat["p50"] != 20.0 || lat["p99"] != 20.0 {
		t.Errorf("/stats latency_ms = %v, want 20 and 20", lat)
	}
}

// A capacity schedule changes the capacity from each step on: requests
// past the capacity of their window's time are slow.
func TestUpstreamCapacitySchedule(t *testing.T) {
	t.Parallel()
	steps, err := ParseCapacitySchedule("0s:4, 2s:2,3s:0")
	if err != nil {
		t.Fatal(err)
	}
	u := newTestUpstream(t, UpstreamConfig{Latency: time.Millisecond, OverloadLatency: time.Second, Capacity: 100, CapacitySchedule: steps})
	slow := func(sec int, n int) int {
		k := 0
		for i := range n {
			if u.Decide(t0.Add(time.Duration(sec)*time.Second+time.Duration(i)*time.Millisecond)).Reason != ReasonOK {
				k++
			}
		}
		return k
	}
	for _, tc := range []struct{ sec, n, slow, capacity int }{
		{0, 5, 1, 4}, {1, 4, 0, 4}, {2, 4, 2, 2}, {3, 50, 0, 0},
	} {
		if got := slow(tc.sec, tc.n); got != tc.slow {
			t.Errorf("second %d: %d of %d not ok, want %d", tc.sec, got, tc.n, tc.slow)
		}
		if c := u.Stats(t0.Add(time.Duration(tc.sec)*time.Second + 900*time.Millisecond)).Capacity; c != tc.capacity {
			t.Errorf("second %d: stats say capacity %d, want %d", tc.sec, c, tc.capacity)
		}
	}
	for _, bad := range []string{"20s", "x:1", "1s:many", "1s:-1"} {
		steps, err := ParseCapacitySchedule(bad)
		if err == nil {
			err = UpstreamConfig{CapacitySchedule: steps}.Validate()
		}
		if err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if err := (UpstreamConfig{CapacitySchedule: []CapacityStep{{At: 2 * time.Second}, {At: time.Second}}}).Validate(); err == nil {
		t.Error("steps out of order: no error")
	}
}
