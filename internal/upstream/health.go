package upstream

import (
	"iter"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
)

// The health of a route's targets: what active checks (upstream.health,
// checks.go) and the exchanges themselves (upstream.eject) say of each,
// and the requests each has in flight (balance least_request).
//
// A target is in rotation unless it failed its active checks
// (unhealthy) or is ejected. Every target starts healthy, those of a
// route with active checks too: a gateway that starts, or a reload that
// adds a target, does not answer 502 until a first check passes, and a
// target that is down is soon passed over anyway, a refused connection
// at once (ejectFor) and a dead one after its checks or exchanges fail.

// Target is what the gateway knows of one target of one route. It
// outlives a reload that keeps the route and the target, so that a
// reload neither brings back a target that is out nor takes out one that
// is back.
type Target struct {
	route, name string
	target      *url.URL
	log         *slog.Logger
	now         func() time.Time // the gateway's clock

	inflight  atomic.Int64 // requests in flight, counted with least_request
	down      atomic.Int64 // Unix ns until which a refused connection passes it over
	unhealthy atomic.Bool  // it failed its active checks
	ejected   atomic.Int64 // Unix ns until which it is ejected; 0: it is not
	fails     atomic.Int32 // exchanges in a row that got no answer
	fives     atomic.Int32 // 5xx answers in a row

	mu        sync.Mutex
	since     time.Time // of the state it is in
	ejections int       // in a row: each ejection lasts twice the one before
	ejectEnd  time.Time // when the last ejection ended, or is to
	okRun     int       // checks passed in a row
	failRun   int       // checks failed in a row
	lastCheck time.Time
	lastOK    bool
	lastWhat  string
	checker   *checker // nil: no active checks; Registry.mu guards it
}

// Target states, as GET /admin/routes shows them.
const (
	StateHealthy   = "healthy"
	StateUnhealthy = "unhealthy" // failed its active checks
	StateEjected   = "ejected"   // its exchanges failed
)

// available reports whether the target is in rotation at now (Unix ns).
// An ejection found over is ended here, so that its end is logged when
// the target takes traffic again.
func (t *Target) available(now int64) bool {
	if t.unhealthy.Load() {
		return false
	}
	if e := t.ejected.Load(); e != 0 {
		if now < e {
			return false
		}
		t.endEjection(e, "ejection_ended")
	}
	return true
}

// endEjection ends the ejection that was to last until e (Unix ns), if
// no one else ended it first.
func (t *Target) endEjection(e int64, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ejected.CompareAndSwap(e, 0) {
		return
	}
	end := time.Unix(0, e)
	if reason != "ejection_ended" {
		// Ended early, by active checks: the next ejection's count
		// starts from now.
		end = t.now()
		t.ejectEnd = end
	}
	if !t.unhealthy.Load() {
		t.since = end
		t.log.Info("upstream target back in rotation", "route", t.route, "target", t.name, "reason", reason)
	}
}

// failed counts an exchange that got no answer: a connection refused,
// reset or timed out.
func (t *Target) failed(e *config.Eject, now time.Time) {
	if e.ConsecutiveFailures > 0 && int(t.fails.Add(1)) >= e.ConsecutiveFailures {
		t.eject(e, now, "consecutive_failures")
	}
}

// answered counts an exchange that got an answer with status.
func (t *Target) answered(e *config.Eject, status int, now time.Time) {
	// Only loads on the way of a healthy target's answers: no write to
	// a line that every request would share.
	if t.fails.Load() != 0 {
		t.fails.Store(0)
	}
	if e.Consecutive5xx == 0 {
		return
	}
	if status >= 500 {
		if int(t.fives.Add(1)) >= e.Consecutive5xx {
			t.eject(e, now, "consecutive_5xx")
		}
	} else if t.fives.Load() != 0 {
		t.fives.Store(0)
	}
}

// eject takes the target out of rotation for BaseTime × 2^(n-1), at most
// MaxTime, for its nth ejection in a row; a target that stayed in
// rotation for MaxTime since its last ejection ended starts from n = 1.
func (t *Target) eject(e *config.Eject, now time.Time, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if until := t.ejected.Load(); until != 0 && now.UnixNano() < until {
		return // already out: the streak that crossed the count first ejected it
	}
	if t.ejections > 0 && now.Sub(t.ejectEnd) >= e.MaxTime {
		t.ejections = 0
	}
	t.ejections++
	d := ejectionTime(e, t.ejections)
	t.ejectEnd = now.Add(d)
	t.ejected.Store(t.ejectEnd.UnixNano())
	t.fails.Store(0)
	t.fives.Store(0)
	// Active checks bring it back early only after healthy_after passes
	// that follow the ejection.
	t.okRun = 0
	if !t.unhealthy.Load() {
		t.since = now
	}
	t.log.Warn("upstream target ejected", "route", t.route, "target", t.name, "reason", reason,
		"ejected_for", d.Seconds(), "ejections", t.ejections)
}

// ejectionTime is the length of the nth ejection in a row.
func ejectionTime(e *config.Eject, n int) time.Duration {
	d := e.BaseTime
	for i := 1; i < n && d < e.MaxTime; i++ {
		d *= 2
	}
	return min(d, e.MaxTime)
}

// checked records the result of an active check at now.
func (t *Target) checked(h config.Health, ok bool, what string, now time.Time) {
	t.mu.Lock()
	t.lastCheck, t.lastOK, t.lastWhat = now, ok, what
	var back bool
	if ok {
		t.okRun++
		t.failRun = 0
		if t.okRun >= h.HealthyAfter && t.unhealthy.Load() {
			t.unhealthy.Store(false)
			t.since = now
			back = t.ejected.Load() == 0
			if back {
				t.log.Info("upstream target back in rotation", "route", t.route, "target", t.name,
					"reason", "health_check", "passed", t.okRun)
			}
		}
	} else {
		t.failRun++
		t.okRun = 0
		if t.failRun >= h.UnhealthyAfter && !t.unhealthy.Load() {
			t.unhealthy.Store(true)
			t.since = now
			t.log.Warn("upstream target failed its health checks", "route", t.route, "target", t.name,
				"reason", "health_check", "check", what, "failed", t.failRun)
		}
	}
	e := t.ejected.Load()
	early := ok && e != 0 && t.okRun >= h.HealthyAfter
	t.mu.Unlock()
	switch {
	case e != 0 && now.UnixNano() >= e:
		t.endEjection(e, "ejection_ended") // over: said without waiting for a request
	case early:
		t.endEjection(e, "health_check")
	}
}

// checksOff forgets what active checks said, when a reload turns them
// off: a target they had taken out comes back.
func (t *Target) checksOff() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.okRun, t.failRun, t.lastCheck, t.lastWhat = 0, 0, time.Time{}, ""
	if t.unhealthy.CompareAndSwap(true, false) {
		t.since = t.now()
		t.log.Info("upstream target back in rotation", "route", t.route, "target", t.name, "reason", "health_checks_off")
	}
}

// State is the target's state at now, as GET /admin/routes names it.
func (t *Target) State(now time.Time) string {
	switch {
	case t.unhealthy.Load():
		return StateUnhealthy
	case t.ejected.Load() > now.UnixNano():
		return StateEjected
	}
	return StateHealthy
}

// Name is the target as its route's configuration has it.
func (t *Target) Name() string { return t.name }

// Status is what the gateway knows of the target at now, as GET
// /admin/routes shows it; least says the route balances by
// least_request, which counts the target's requests in flight.
func (t *Target) Status(now time.Time, least bool) TargetStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := TargetStatus{
		Target: t.name, State: t.State(now), Since: t.since,
		ConsecutiveFailures: int(t.fails.Load()), Consecutive5xx: int(t.fives.Load()),
		Ejections: t.ejections,
	}
	if least {
		n := t.inflight.Load()
		s.InFlight = &n
	}
	if e := t.ejected.Load(); e > now.UnixNano() {
		until := time.Unix(0, e)
		s.EjectedUntil = &until
	}
	if !t.lastCheck.IsZero() {
		s.LastCheck = &CheckStatus{At: t.lastCheck, OK: t.lastOK, Result: t.lastWhat, Passed: t.okRun, Failed: t.failRun}
	}
	return s
}

// TargetStatus is one target of a route, and what the gateway knows of
// its health.
type TargetStatus struct {
	Target string `json:"target"`
	// State is healthy, unhealthy (it failed its active checks) or
	// ejected (its exchanges failed; EjectedUntil says until when).
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// InFlight counts its requests in flight, with balance least_request.
	InFlight *int64 `json:"in_flight,omitempty"`

	// ConsecutiveFailures and Consecutive5xx are the exchanges in a row
	// that got no answer, and that got a 5xx.
	ConsecutiveFailures int `json:"consecutive_failures"`
	Consecutive5xx      int `json:"consecutive_5xx"`
	// Ejections counts the ejections in a row, each twice as long as the
	// one before.
	Ejections    int        `json:"ejections"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`

	// LastCheck is the last active check; nil before the first, and
	// without active checks.
	LastCheck *CheckStatus `json:"last_check,omitempty"`
}

// CheckStatus is a target's last active check.
type CheckStatus struct {
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	Result string    `json:"result"` // the status, or what failed
	// Passed and Failed are the checks in a row that passed, or failed,
	// up to this one.
	Passed int `json:"passed"`
	Failed int `json:"failed"`
}

// Targets yields the states of the upstream's targets, in the order of
// its configuration.
func (u *Upstream) Targets() iter.Seq[*Target] { return slices.Values(u.state) }

// Least reports an upstream that balances by least_request.
func (u *Upstream) Least() bool { return u.least }

// Checked reports an upstream whose targets have active checks.
func (u *Upstream) Checked() bool { return u.health.Interval > 0 }

// Registry holds the target states of the running routes, by route and
// target, and the active checkers that run on them. The zero value is not
// ready: NewRegistry makes one.
type Registry struct {
	log *slog.Logger
	now func() time.Time // the gateway's clock

	mu      sync.Mutex
	targets map[string]*Target
	running sync.WaitGroup
	n       atomic.Int64 // checkers running
	closed  bool         // by Close: no checker starts after it
}

// NewRegistry returns a registry whose targets log to log and go by the
// clock now.
func NewRegistry(log *slog.Logger, now func() time.Time) *Registry {
	return &Registry{log: log, now: now}
}

func targetKey(route, target string) string { return route + "\x00" + target }

// Targets returns the states of a route's targets: the running ones for
// the targets the route had, new ones for the others. New ones are kept
// only once Apply takes the upstreams they are part of.
func (hr *Registry) Targets(route string, targets []*url.URL) []*Target {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	out := make([]*Target, len(targets))
	for i, u := range targets {
		name := u.String()
		t := hr.targets[targetKey(route, name)]
		for _, o := range out[:i] {
			if o.name == name {
				t = o // a target listed twice is one target
			}
		}
		if t == nil {
			t = &Target{route: route, name: name, target: u, log: hr.log, now: hr.now, since: hr.now()}
		}
		out[i] = t
	}
	return out
}

// Apply makes the targets of ups, the upstreams of the routes a new
// configuration serves, the running ones: it starts the active checks of
// their routes, restarts those whose settings changed, and stops those of
// the targets no upstream has any longer. Reload calls it once the
// configuration serves.
func (hr *Registry) Apply(ups []*Upstream) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.closed {
		return
	}
	keep := map[string]*Target{}
	for _, u := range ups {
		for _, t := range u.state {
			key := targetKey(u.route, t.name)
			if keep[key] != nil {
				continue
			}
			keep[key] = t
			h := u.health
			if c := t.checker; c != nil && (!c.settings.Same(h) || c.protocol != u.protocol || c.tlsID != u.tlsID) {
				c.stop()
				t.checker = nil
			}
			if h.Interval == 0 {
				t.checksOff()
				continue
			}
			if t.checker == nil {
				t.checker = hr.start(t, h, u)
			}
		}
	}
	for key, t := range hr.targets {
		if keep[key] != t && t.checker != nil {
			t.checker.stop()
			t.checker = nil
		}
	}
	hr.targets = keep
}

// Checkers counts the active checkers running.
func (hr *Registry) Checkers() int64 { return hr.n.Load() }

// Close stops every checker and waits for them.
func (hr *Registry) Close() {
	hr.mu.Lock()
	hr.closed = true
	for _, t := range hr.targets {
		if t.checker != nil {
			t.checker.stop()
			t.checker = nil
		}
	}
	hr.mu.Unlock()
	hr.running.Wait()
}
