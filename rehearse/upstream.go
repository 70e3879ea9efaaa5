package rehearse

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// UpstreamConfig describes a mock downstream. The zero value answers 200 at
// once to everything, without limit.
type UpstreamConfig struct {
	// Latency is added to every answer within capacity; zero answers at once.
	Latency time.Duration
	// Jitter varies every added latency uniformly by up to ±Jitter (never
	// below zero); zero adds none.
	Jitter time.Duration
	// ErrorRate is the share, in [0, 1], of answers that are 500 instead
	// of Status, drawn at random after the latency.
	ErrorRate float64
	// Capacity is how many requests per 1-second window are served
	// normally; zero means no limit. See Upstream for the overload model.
	Capacity int
	// CapacitySchedule changes Capacity during a run: from each step's At
	// (since the start) on, the capacity is the step's, until the next
	// step; before the first, Capacity. Steps are in the order of At.
	CapacitySchedule []CapacityStep
	// OverloadLatency replaces Latency for the requests past Capacity in a
	// window; zero answers them at once.
	OverloadLatency time.Duration
	// FailAfter and RecoverAfter script an outage: from FailAfter after
	// the start until RecoverAfter later, every request is answered 503 at
	// once. A zero FailAfter means no outage; a zero RecoverAfter, an
	// outage that never ends.
	FailAfter, RecoverAfter time.Duration
	// Status is the status of a normal answer; zero means 200.
	Status int
	// Body is the body of a normal answer.
	Body string
	// Seed draws the jitter and the errors; zero draws a random seed.
	Seed uint64
}

// Validate reports every problem of c.
func (c UpstreamConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"latency", c.Latency}, {"jitter", c.Jitter}, {"overload-latency", c.OverloadLatency}, {"fail-after", c.FailAfter}, {"recover-after", c.RecoverAfter}} {
		if d.v < 0 {
			bad("%s %v: must not be negative", d.name, d.v)
		}
	}
	if !(c.ErrorRate >= 0 && c.ErrorRate <= 1) {
		bad("error-rate %v: must be between 0 and 1", c.ErrorRate)
	}
	if c.Capacity < 0 {
		bad("capacity %d: must not be negative (0 is no limit)", c.Capacity)
	}
	for i, st := range c.CapacitySchedule {
		switch {
		case st.At < 0 || st.Capacity < 0:
			bad("capacity-schedule %v:%d: a time and a capacity that are not negative", st.At, st.Capacity)
		case i > 0 && st.At <= c.CapacitySchedule[i-1].At:
			bad("capacity-schedule: %v after %v: the steps go in order of time", st.At, c.CapacitySchedule[i-1].At)
		}
	}
	if c.RecoverAfter > 0 && c.FailAfter == 0 {
		bad("recover-after needs fail-after: there is no outage to recover from")
	}
	if c.Status != 0 && (c.Status < 200 || c.Status > 599) {
		bad("status %d: must be between 200 and 599", c.Status)
	}
	return errors.Join(errs...)
}

// A CapacityStep is one step of a capacity schedule: from At on, Capacity.
type CapacityStep struct {
	At       time.Duration
	Capacity int
}

// ParseCapacitySchedule reads a schedule written as --capacity-schedule
// takes it: steps "AT:CAPACITY" separated by commas, AT a duration from
// the start ("0s:500,20s:250,40s:500").
func ParseCapacitySchedule(s string) ([]CapacityStep, error) {
	var steps []CapacityStep
	for part := range strings.SplitSeq(s, ",") {
		at, c, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("%q: a step is AT:CAPACITY, such as 20s:250", part)
		}
		d, err := time.ParseDuration(at)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", part, err)
		}
		n, err := strconv.Atoi(c)
		if err != nil {
			return nil, fmt.Errorf("%q: the capacity is a whole number of requests a second", part)
		}
		steps = append(steps, CapacityStep{At: d, Capacity: n})
	}
	return steps, nil
}

// capacityAt is the capacity at since from the start. The caller holds
// u.mu.
func (u *Upstream) capacityAt(since time.Duration) int {
	c := u.cfg.Capacity
	for _, st := range u.cfg.CapacitySchedule {
		if since < st.At {
			break
		}
		c = st.Capacity
	}
	return c
}

// A Reason says why an Upstream answered as it did. The mock sends it in
// the X-Upstream-Reason header.
type Reason string

const (
	ReasonOK       Reason = "ok"       // within capacity: Status after Latency
	ReasonError    Reason = "error"    // 500, drawn by ErrorRate
	ReasonSlow     Reason = "slow"     // past Capacity: Status after OverloadLatency
	ReasonOverload Reason = "overload" // past 1.5 × Capacity: 503 after OverloadLatency
	ReasonOutage   Reason = "outage"   // inside the scripted outage: 503 at once
)

// An Answer is what an Upstream does with one request: wait Delay, then
// answer Status.
type Answer struct {
	Status int
	Delay  time.Duration
	Reason Reason
}

// An Upstream is a mock downstream that degrades as a fragile third-party
// API does (a flash sale's coupon API, say): fine at 200 ms up to 500
// requests per second, 3 s and failing beyond.
//
// The overload model counts arrivals in 1-second windows from the start.
// The first Capacity requests of a window are served normally: Status after
// Latency ± Jitter. The next Capacity/2 wait OverloadLatency ± Jitter instead
// and then succeed — the service is slow, not yet down. Every request past
// 1.5 × Capacity in the window waits OverloadLatency ± Jitter too and is then
// answered 503: a slow failure, the kind that ties up a caller's
// connections. So at 1,000 requests per second against a capacity of 500,
// each second serves 500 fast, 250 slow, and fails 250 slowly; a new window
// starts fresh. ErrorRate applies to every answer that is not a 503.
//
// An Upstream is an http.Handler; GET /stats answers its UpstreamStats as
// JSON. Decide and Stats take the time as an argument, so that tests need
// no clock; ServeHTTP reads the clock.
type Upstream struct {
	cfg   UpstreamConfig
	start time.Time

	mu       sync.Mutex
	down     bool // an outage turned on by Outage
	rng      *rand.Rand
	window   int64 // the current window, in seconds from start
	count    int   // arrivals in window
	prev     int   // arrivals in window-1
	total    int64
	byStatus map[int]int64
	delays   Histogram // the latency added, since the start
	// The latency added in window and in window-1.
	winDelays, prevDelays Histogram
}

// NewUpstream returns an Upstream started at start.
func NewUpstream(cfg UpstreamConfig, start time.Time) (*Upstream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Status == 0 {
		cfg.Status = http.StatusOK
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Upstream{
		cfg:      cfg,
		start:    start,
		rng:      rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		byStatus: make(map[int]int64),
	}, nil
}

// roll moves the window to the one holding since. The caller holds u.mu.
func (u *Upstream) roll(since time.Duration) {
	w := int64(max(since, 0) / time.Second)
	if w == u.window {
		return
	}
	if w == u.window+1 {
		u.prev = u.count
		u.winDelays, u.prevDelays = u.prevDelays, u.winDelays
	} else {
		u.prev = 0
		u.prevDelays.Reset()
	}
	u.winDelays.Reset()
	u.window, u.count = w, 0
}

// Outage turns an outage on or off now, besides the one FailAfter and
// RecoverAfter script: while it is on, every request is answered 503 at
// once. A script whose outage ends on what it caused (once a breaker in
// front has opened) uses it.
func (u *Upstream) Outage(on bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.down = on
}

// inOutage reports whether an outage is on; the caller holds u.mu.
func (u *Upstream) inOutage(since time.Duration) bool {
	c := &u.cfg
	if u.down {
		return true
	}
	if c.FailAfter == 0 || since < c.FailAfter {
		return false
	}
	return c.RecoverAfter == 0 || since < c.FailAfter+c.RecoverAfter
}

// jittered returns d ± Jitter. The caller holds u.mu.
func (u *Upstream) jittered(d time.Duration) time.Duration {
	if j := u.cfg.Jitter; j > 0 {
		d += time.Duration((u.rng.Float64()*2 - 1) * float64(j))
	}
	return max(d, 0)
}

// Decide decides the answer to a request that arrives at now, and counts it.
func (u *Upstream) Decide(now time.Time) Answer {
	u.mu.Lock()
	defer u.mu.Unlock()
	since := now.Sub(u.start)
	u.roll(since)
	u.count++
	c := &u.cfg
	capacity := u.capacityAt(since)
	var a Answer
	switch {
	case u.inOutage(since):
		a = Answer{Status: http.StatusServiceUnavailable, Reason: ReasonOutage}
	case capacity > 0 && float64(u.count) > 1.5*float64(capacity):
		a = Answer{Status: http.StatusServiceUnavailable, Delay: u.jittered(c.OverloadLatency), Reason: ReasonOverload}
	case capacity > 0 && u.count > capacity:
		a = Answer{Status: c.Status, Delay: u.jittered(c.OverloadLatency), Reason: ReasonSlow}
	default:
		a = Answer{Status: c.Status, Delay: u.jittered(c.Latency), Reason: ReasonOK}
	}
	if a.Status != http.StatusServiceUnavailable && c.ErrorRate > 0 && u.rng.Float64() < c.ErrorRate {
		a.Status, a.Reason = http.StatusInternalServerError, ReasonError
	}
	u.total++
	u.byStatus[a.Status]++
	u.delays.Record(a.Delay)
	u.winDelays.Record(a.Delay)
	return a
}

// UpstreamStats is what an Upstream has served, as GET /stats answers it.
type UpstreamStats struct {
	// Uptime is the time since the start, in seconds.
	Uptime float64 `json:"uptime_s"`
	// Requests counts every request answered, /stats excluded.
	Requests int64 `json:"requests"`
	// Status counts the answers by status.
	Status map[int]int64 `json:"status"`
	// Rate is the requests that arrived in the last full 1-second window.
	Rate int `json:"rate"`
	// Latency is the latency the mock added since the start, in
	// milliseconds; LastSecond, in the last full 1-second window.
	Latency    LatencyMS `json:"latency_ms"`
	LastSecond LatencyMS `json:"latency_last_second_ms"`
	// Outage is whether the scripted outage is on.
	Outage bool `json:"outage"`
	// Overloaded is whether the current window is past its capacity.
	Overloaded bool `json:"overloaded"`
	// Capacity is the capacity now (0: no limit), as the schedule has it.
	Capacity int `json:"capacity"`
}

// LatencyMS holds percentiles in milliseconds.
type LatencyMS struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Stats returns what u has served up to now.
func (u *Upstream) Stats(now time.Time) UpstreamStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	since := now.Sub(u.start)
	u.roll(since)
	s := UpstreamStats{
		Uptime:     since.Seconds(),
		Requests:   u.total,
		Status:     make(map[int]int64, len(u.byStatus)),
		Rate:       u.prev,
		Latency:    percentiles(&u.delays),
		LastSecond: percentiles(&u.prevDelays),
		Outage:     u.inOutage(since),
		Capacity:   u.capacityAt(since),
	}
	s.Overloaded = s.Capacity > 0 && u.count > s.Capacity
	for code, n := range u.byStatus {
		s.Status[code] = n
	}
	return s
}

func percentiles(h *Histogram) LatencyMS {
	return LatencyMS{P50: ms(h.Quantile(0.5)), P99: ms(h.Quantile(0.99))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ServeHTTP answers GET /stats with u's statistics and every other request
// as Decide says, waiting out the delay unless the client goes away first.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(u.Stats(time.Now()))
		return
	}
	a := u.Decide(time.Now())
	// Read the request body, as a real service would, so the connection
	// can be reused.
	io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	if a.Delay > 0 {
		t := time.NewTimer(a.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	body := u.cfg.Body
	if a.Reason != ReasonOK && a.Reason != ReasonSlow {
		body = "mock upstream: " + string(a.Reason) + "\n"
	}
	h := w.Header()
	h.Set("X-Upstream-Reason", string(a.Reason))
	if t := strings.TrimSpace(body); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.WriteHeader(a.Status)
	io.WriteString(w, body)
}
