package limit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errStoreTripped is returned, wrapped with ErrStoreUnavailable, while a
// guarded store is resting after repeated failures.
var errStoreTripped = errors.New("store failing: not asked until the next probe")

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
// count. The guarded store's Unwrap method returns s.
func Guard(s Store, o GuardOptions) Store {
	if o.Failures <= 0 {
		o.Failures = 3
	}
	if o.Rest <= 0 {
		o.Rest = 250 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &guarded{Store: s, o: o}
}

// guarded is a Store behind a Guard.
type guarded struct {
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
	return ErrStoreUnavailable.Error() + ": " + errStoreTripped.Error()
}
func (*trippedError) Unwrap() []error { return []error{ErrStoreUnavailable, errStoreTripped} }

// enter reports whether a call may go to the store; probe marks the one
// call that tests a resting store.
func (g *guarded) enter() (ok, probe bool) {
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

func (g *guarded) leave(probe bool, err error) {
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

// tripped reports whether the guard is resting the store.
func (g *guarded) tripped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures >= g.o.Failures
}

// Decide implements Store.
func (g *guarded) Decide(ctx context.Context, req *Request) (Result, error) {
	ok, probe := g.enter()
	if !ok {
		return Result{}, errTripped
	}
	res, err := g.Store.Decide(ctx, req)
	if err == nil && res.AnsweredLocally() {
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

// Peek implements Store.
func (g *guarded) Peek(ctx context.Context, now time.Time, r *Rule, k Key) (State, error) {
	ok, probe := g.enter()
	if !ok {
		return State{}, errTripped
	}
	s, err := g.Store.Peek(ctx, now, r, k)
	g.leave(probe, err)
	return s, err
}

// Unwrap returns the guarded store.
func (g *guarded) Unwrap() Store { return g.Store }
