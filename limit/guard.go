package limit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStoreTripped is returned, wrapped with ErrStoreUnavailable, while a
// guarded store is resting after repeated failures.
var ErrStoreTripped = errors.New("store failing: not asked until the next probe")

// GuardOptions configure Guard. The zero value is usable.
type GuardOptions struct {
	// Failures is how many consecutive failures trip the guard. Zero means 3.
	Failures int

	// Rest is how long a tripped guard answers at once without asking the
	// store, before it lets one probe through. Zero means 250ms, so that a
	// store that is healthy again is used within a second.
	Rest time.Duration

	// Now is the guard's clock. Nil means time.Now.
	Now func() time.Time
}

// Guard wraps s so that, while s fails, callers do not each wait for its
// timeout: after Failures consecutive failures, calls fail at once with
// ErrStoreUnavailable for Rest; then one call probes the store, and its
// success closes the guard, its failure rests it again. Only failures that
// wrap ErrStoreUnavailable count; a call that gets an answer resets the
// count.
func Guard(s Store, o GuardOptions) *Guarded {
	if o.Failures <= 0 {
		o.Failures = 3
	}
	if o.Rest <= 0 {
		o.Rest = 250 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Guarded{Store: s, o: o}
}

// Guarded is a Store behind a Guard.
type Guarded struct {
	Store
	o GuardOptions

	mu       sync.Mutex
	failures int
	until    time.Time // resting until then
	probing  bool
}

var errTripped = &trippedError{}

type trippedError struct{}

func (*trippedError) Error() string {
	return ErrStoreUnavailable.Error() + ": " + ErrStoreTripped.Error()
}
func (*trippedError) Unwrap() []error { return []error{ErrStoreUnavailable, ErrStoreTripped} }

// enter reports whether a call may go to the store; probe marks the one
// call that tests a resting store.
func (g *Guarded) enter() (ok, probe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures < g.o.Failures {
		return true, false
	}
	if g.probing || g.o.Now().Before(g.until) {
		return false, false
	}
	g.probing = true
	return true, true
}

func (g *Guarded) leave(probe bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if probe {
		g.probing = false
	}
	if err == nil || !errors.Is(err, ErrStoreUnavailable) {
		g.failures = 0
		return
	}
	g.failures++
	if g.failures >= g.o.Failures {
		g.until = g.o.Now().Add(g.o.Rest)
	}
}

// Tripped reports whether the guard is resting the store.
func (g *Guarded) Tripped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures >= g.o.Failures
}

// Decide implements Store.
func (g *Guarded) Decide(ctx context.Context, req *Request) (Result, error) {
	ok, probe := g.enter()
	if !ok {
		return Result{}, errTripped
	}
	res, err := g.Store.Decide(ctx, req)
	if err == nil && answeredLocally(res) {
		// The store answered from its memory of exhausted keys without
		// asking its server: no news of whether the server answers.
		g.mu.Lock()
		if probe {
			g.probing = false
		}
		g.mu.Unlock()
		return res, err
	}
	g.leave(probe, err)
	return res, err
}

// answeredLocally reports whether res came from a store's memory
// (Decision.Local) rather than from where its counters live.
func answeredLocally(res Result) bool {
	for i := range res.Decisions {
		if res.Decisions[i].Local {
			return true
		}
	}
	return false
}

// Peek implements Store.
func (g *Guarded) Peek(ctx context.Context, now time.Time, r *Rule, k Key) (State, error) {
	ok, probe := g.enter()
	if !ok {
		return State{}, errTripped
	}
	s, err := g.Store.Peek(ctx, now, r, k)
	g.leave(probe, err)
	return s, err
}

// Unwrap returns the guarded store.
func (g *Guarded) Unwrap() Store { return g.Store }
