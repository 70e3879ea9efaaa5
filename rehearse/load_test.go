package rehearse

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// The load tests run real requests against httptest servers, at rates low
// enough for a busy machine running -race.

func TestRunConst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	users, ips := map[string]int{}, map[string]int{}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || string(body) != "hi" || r.Header.Get("X-Test") != "yes" || r.Host != "coupons.example" {
			t.Errorf("request %s %q X-Test %q Host %q", r.Method, body, r.Header.Get("X-Test"), r.Host)
		}
		mu.Lock()
		users[r.Header.Get("X-User-Id")]++
		ips[r.Header.Get("X-Forwarded-For")]++
		mu.Unlock()
		n.Add(1)
	}))
	defer srv.Close()

	var seen []int
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL + "/api/receive",
		Method:  "POST",
		Header:  http.Header{"X-Test": {"yes"}, "Host": {"coupons.example"}},
		Body:    []byte("hi"),
		Profile: Profile{Shape: Const, Rate: 100, Duration: 2 * time.Second},
		Users:   5,
		IPs:     3,
		OnSecond: func(s Second) {
			seen = append(seen, s.T)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 200 || res.Total.Sent != 200 || res.Total.OK != 200 || n.Load() != 200 {
		t.Fatalf("scheduled %d, sent %d, 2xx %d, server saw %d; want 200 of each", res.Scheduled, res.Total.Sent, res.Total.OK, n.Load())
	}
	if len(res.Seconds) != 2 || len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
		t.Fatalf("seconds %+v, OnSecond saw %v; want 0 and 1", res.Seconds, seen)
	}
	for _, s := range res.Seconds {
		if !near(int(s.Sent), 100, 1) || s.OK != s.Sent || s.P50 <= 0 || s.P99 < s.P50 {
			t.Errorf("second %+v", s)
		}
	}
	if len(users) != 5 || users["u1"] == 0 || users["u5"] == 0 || users[""] != 0 {
		t.Errorf("users %v, want u1..u5", users)
	}
	if len(ips) != 3 || ips["10.0.0.1"] == 0 || ips["10.0.0.3"] == 0 {
		t.Errorf("addresses %v, want 10.0.0.1..3", ips)
	}
	if r := res.OfferedRate(); r != 100 {
		t.Errorf("offered rate %v, want 100", r)
	}
	if r := res.AchievedRate(); r < 95 || r > 105 {
		t.Errorf("achieved rate %v, want about 100", r)
	}
	if res.Total.P50 <= 0 || res.P999 < res.Total.P99 || res.Max < res.P999 || res.Interrupted {
		t.Errorf("result %+v", res)
	}
}

// A slow target shows as latency measured from the scheduled send, and
// the offered rate does not drop.
func TestRunOpenLoop(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
	}))
	defer srv.Close()
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 50, Duration: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Sent != 50 || res.Total.OK != 50 {
		t.Errorf("sent %d, 2xx %d; want 50 — a slow target must not slow the sender", res.Total.Sent, res.Total.OK)
	}
	if res.Total.P50 < 100*time.Millisecond {
		t.Errorf("p50 %v, below the target's 100ms", res.Total.P50)
	}
}

func TestRunRetryImmediate(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 20, Duration: time.Second},
		Retry:   RetryImmediate,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(20 * (1 + MaxRetries))
	if res.Total.Sent != want || res.Total.Retries != want-20 || res.Total.TooMany != want || n.Load() != want || res.Succeeded != 0 {
		t.Errorf("sent %d, retries %d, 429 %d, server saw %d, succeeded %d; want %d sent, %d retries",
			res.Total.Sent, res.Total.Retries, res.Total.TooMany, n.Load(), res.Succeeded, want, want-20)
	}
}

func TestRunRetryBackoff(t *testing.T) {
	t.Parallel()
	// The first attempt is told to come back in 1 s; the retry succeeds.
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 1, Duration: time.Second},
		Retry:   RetryBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(arrivals) != 2 || arrivals[1].Sub(arrivals[0]) < time.Second {
		t.Fatalf("arrivals %v: want two, 1s apart", arrivals)
	}
	if len(res.Seconds) != 2 || res.Seconds[0].Unavailable != 1 || res.Seconds[1].Retries != 1 || res.Seconds[1].OK != 1 || res.Succeeded != 1 {
		t.Errorf("seconds %+v, succeeded %d; want the 503 in second 0 and the retry's 2xx in second 1", res.Seconds, res.Succeeded)
	}

	// Without Retry-After: 100, 200 and 400 ms, each ±50%.
	var m atomic.Int64
	always := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer always.Close()
	start := time.Now()
	res, err = Run(context.Background(), LoadConfig{
		URL:     always.URL,
		Profile: Profile{Shape: Const, Rate: 1, Duration: time.Second},
		Retry:   RetryBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Load() != 1+MaxRetries || res.Total.Sent != 1+MaxRetries {
		t.Errorf("server saw %d attempts, sent %d; want %d", m.Load(), res.Total.Sent, 1+MaxRetries)
	}
	if d := time.Since(start); d < 350*time.Millisecond {
		t.Errorf("three backoffs took %v, less than 350ms", d)
	}
}

func TestRunConcurrencyCap(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	// Released well after the last of the 50 requests is due at 490ms.
	time.AfterFunc(time.Second, func() { close(release) })
	res, err := Run(context.Background(), LoadConfig{
		URL:            srv.URL,
		Profile:        Profile{Shape: Const, Rate: 100, Duration: 500 * time.Millisecond},
		ConcurrencyCap: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 50 || res.Total.Sent != 5 || res.Total.Dropped != 45 || res.Total.OK != 5 {
		t.Errorf("scheduled %d, sent %d, dropped %d, 2xx %d; want 50, 5, 45, 5",
			res.Scheduled, res.Total.Sent, res.Total.Dropped, res.Total.OK)
	}
	if len(res.Seconds) != 1 {
		t.Errorf("%d rows for a half-second run, want 1", len(res.Seconds))
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	closed := testnet.RefusedURL(t)
	res, err := Run(context.Background(), LoadConfig{
		URL:     closed,
		Profile: Profile{Shape: Const, Rate: 10, Duration: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Sent != 5 || res.Total.Errors != 5 || res.Total.Other != 5 || res.Errors["connection refused"] != 5 {
		t.Errorf("against a closed port: %+v, errors %v", res.Total, res.Errors)
	}
	if want := (Breakdown{"err:refused": 5}); !reflect.DeepEqual(res.Total.OtherBy, want) {
		t.Errorf("against a closed port: other was %v, want %v", res.Total.OtherBy, want)
	}

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	res, err = Run(context.Background(), LoadConfig{
		URL:     slow.URL,
		Profile: Profile{Shape: Const, Rate: 10, Duration: 300 * time.Millisecond},
		Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total.Errors != 3 || res.Errors["timeout"] != 3 || res.Total.P50 < 100*time.Millisecond {
		t.Errorf("against a slow target with a 100ms timeout: %+v, errors %v", res.Total, res.Errors)
	}
	if want := (Breakdown{"err:timeout": 3}); !reflect.DeepEqual(res.Total.OtherBy, want) {
		t.Errorf("against a slow target: other was %v, want %v", res.Total.OtherBy, want)
	}
}

// An answer that is not 2xx, 429 or 503 is counted as other under its
// status, in its second and in the total.
func TestRunOtherByStatus(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 4 {
		case 0:
			w.WriteHeader(http.StatusGatewayTimeout)
		case 1:
			w.WriteHeader(http.StatusBadGateway)
		case 2:
			w.WriteHeader(http.StatusGatewayTimeout)
		default:
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 40, Duration: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Breakdown{"504": 10, "502": 5}
	if res.Total.Sent != 20 || res.Total.TooMany != 5 || res.Total.Other != 15 || res.Total.Errors != 0 || !reflect.DeepEqual(res.Total.OtherBy, want) {
		t.Errorf("total %+v, want 20 sent, 5 429, other 15 as %v", res.Total, want)
	}
	if len(res.Seconds) != 1 || !reflect.DeepEqual(res.Seconds[0].OtherBy, want) {
		t.Errorf("seconds %+v, want one with other %v", res.Seconds, want)
	}
}

func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 20, Duration: 10 * time.Second},
		Retry:   RetryBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("an interrupted run took %v to return", d)
	}
	if !res.Interrupted || len(res.Seconds) != 1 || res.Total.Canceled != res.Total.Sent || res.Total.Sent < 3 {
		t.Errorf("interrupted: %v, rows %+v, errors %v", res.Interrupted, res.Seconds, res.Errors)
	}
	if r := res.OfferedRate(); r < 15 || r > 25 {
		t.Errorf("offered rate of the interrupted run: %v, want about 20", r)
	}
}

// Stop ends a run as its Duration would have: what was sent is answered,
// the run is not interrupted, and its rows and Duration end there.
func TestRunStop(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 3 {
			close(stop)
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), LoadConfig{
		URL:     srv.URL,
		Profile: Profile{Shape: Const, Rate: 20, Duration: time.Hour},
		Stop:    stop,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Interrupted || res.Total.Sent < 3 || res.Total.OK != res.Total.Sent || res.Total.OK != n.Load() {
		t.Errorf("interrupted %v, sent %d, answered 2xx %d, served %d; want all sent answered, not interrupted",
			res.Interrupted, res.Total.Sent, res.Total.OK, n.Load())
	}
	d := res.Profile.Duration
	if d <= 0 || d >= time.Hour || len(res.Seconds) != int((d+time.Second-1)/time.Second) {
		t.Errorf("duration %v with %d rows; want the run's own length, a row for each of its seconds", d, len(res.Seconds))
	}
}

// OnAttempt sees every attempt once, retries and attempts without an
// answer included, with the latency its second counts it at.
func TestRunOnAttempt(t *testing.T) {
	t.Parallel()
	// Every other request is turned away at once with a 429, which the
	// client retries; the others are answered after 30 ms.
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(30 * time.Millisecond)
	}))
	defer srv.Close()
	var mu sync.Mutex
	var got []Attempt
	onAttempt := func(a Attempt) {
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
	}
	res, err := Run(context.Background(), LoadConfig{
		URL:       srv.URL,
		Profile:   Profile{Shape: Const, Rate: 20, Duration: time.Second},
		Retry:     RetryImmediate,
		OnAttempt: onAttempt,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ok, tooMany, retries int64
	for _, a := range got {
		switch {
		case a.At < 0 || a.At >= 2*time.Second || a.Error != "":
			t.Errorf("attempt %+v", a)
		case a.Status == http.StatusOK && a.Latency < 30*time.Millisecond:
			t.Errorf("attempt %+v: answered 200 in less than the server's 30ms", a)
		}
		switch a.Status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			tooMany++
		}
		if a.Retry {
			retries++
		}
	}
	tot := res.Total
	if int64(len(got)) != tot.Sent || ok != tot.OK || tooMany != tot.TooMany || retries != tot.Retries || retries == 0 {
		t.Errorf("OnAttempt saw %d attempts (%d 200, %d 429, %d retries); the run counted %d sent (%d 2xx, %d 429, %d retries)",
			len(got), ok, tooMany, retries, tot.Sent, tot.OK, tot.TooMany, tot.Retries)
	}

	got = nil
	if _, err := Run(context.Background(), LoadConfig{
		URL:       testnet.RefusedURL(t),
		Profile:   Profile{Shape: Const, Rate: 10, Duration: 300 * time.Millisecond},
		OnAttempt: onAttempt,
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != (Attempt{At: got[0].At, Latency: got[0].Latency, Error: "err:refused"}) {
		t.Errorf("against a closed port, OnAttempt saw %+v; want 3 attempts without a status, err:refused", got)
	}
}

func TestLoadConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), LoadConfig{
		URL:            "ftp://x",
		Profile:        Profile{Shape: "zigzag", Rate: 1, Duration: time.Second},
		Users:          -1,
		IPs:            1 << 25,
		Retry:          "sometimes",
		ConcurrencyCap: -1,
		Timeout:        -time.Second,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`url "ftp://x"`, `profile "zigzag"`, "users -1", "ips 33554432", `retry "sometimes"`, "concurrency-cap -1", "timeout -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		v    string
		want time.Duration
	}{
		{"", -1},
		{"3", 3 * time.Second},
		{"0", 0},
		{"-1", -1},
		{"soon", -1},
		{"Tue, 01 Jan 2030 10:00:05 GMT", 5 * time.Second},
		{"Tue, 01 Jan 2030 09:00:00 GMT", 0},
	} {
		if got := parseRetryAfter(tt.v, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
