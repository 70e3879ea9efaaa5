package limit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStoreUnavailable is wrapped by every error that means a store could
// not decide: unreachable, too slow, full. Callers apply their on_error
// policy when errors.Is(err, ErrStoreUnavailable).
var ErrStoreUnavailable = errors.New("limit: store unavailable")

// ErrFull is returned by a store that has no room for a new key.
var ErrFull = fmt.Errorf("%w: store is full", ErrStoreUnavailable)

// Store decides limits. Implementations are safe for concurrent use.
type Store interface {
	// Decide decides every limit of req together: the request is admitted
	// only if every non-shadow limit admits it, and a rejected request
	// consumes nothing from any limit. Limits on one counter are decided
	// as one (Request.Limits).
	Decide(ctx context.Context, req *Request) (Result, error)

	// Peek reads the state of one key without consuming anything, at now
	// (zero: the time of the call), as Decide would at Request.Now.
	Peek(ctx context.Context, now time.Time, r *Rule, k Key) (State, error)

	// Reset forgets one key's state.
	Reset(ctx context.Context, r *Rule, k Key) error

	// Release frees the concurrency leases that lease holds on limits.
	// It is idempotent, and safe to call for a lease that a timed-out
	// Decide may or may not have taken.
	Release(ctx context.Context, lease string, limits ...Limit) error

	// Renew extends the concurrency leases that lease holds on limits by
	// their rules' LeaseTTL from now, for requests that run long.
	Renew(ctx context.Context, now time.Time, lease string, limits ...Limit) error

	// Close releases the store's resources.
	Close() error
}

// Limit is one rule applied to one key.
type Limit struct {
	Rule *Rule
	Key  Key
}

// Request is what one call to Store.Decide decides.
type Request struct {
	// Limits may name one counter more than once (the same rule name
	// and key, and the same algorithm and window): the request then
	// needs the sum of their costs from it, or one lease for concurrency
	// limits. Their rules must not differ in any other setting than
	// Cost: a request whose rules do is refused with an error before
	// anything is decided.
	Limits []Limit

	// Now is the caller's clock. The memory store decides at Now; the
	// Redis store uses Redis's own clock and reads from Now only where the
	// windows of rules with a Location lie (the local clock's offset at
	// Now). Zero: the time Decide is called.
	Now time.Time

	// Lease identifies the concurrency leases this request takes, chosen
	// by the caller so that it can release them even when it never saw the
	// answer. Required when a limit is a Concurrency rule.
	Lease string

	// Hits multiplies every rule's cost (Envoy's hits_addend). Zero means 1.
	Hits int64

	// Into, when it can hold one Decision per limit, is where the store
	// may write Result.Decisions (Into[:len(Limits)]), so that a caller
	// that decides request after request can reuse one array. Nil: the
	// store makes the slice. The array is the store's until Decide
	// returns without an error; after an error, the caller drops it.
	Into []Decision
}

// Result is the answer to a Request.
type Result struct {
	// Allowed is true when every non-shadow limit admitted the request.
	Allowed bool

	// Decisions holds one Decision per limit, in the order of the request.
	Decisions []Decision

	// Time is the store's clock when it decided: the windows the request
	// counted in are those that contain Time.
	Time time.Time

	// Delay is how long the caller must wait before it proceeds: a token
	// bucket with Queue admitted the request against a token due then.
	Delay time.Duration
}

// AnsweredLocally reports whether the store answered from its memory
// (a Decision marked Local) rather than from where its counters live.
func (r *Result) AnsweredLocally() bool {
	for i := range r.Decisions {
		if r.Decisions[i].Local {
			return true
		}
	}
	return false
}

// Decision is one limit's judgement of a request.
type Decision struct {
	Rule *Rule
	Key  Key

	// Allowed is this limit's own judgement; for a shadow rule it may be
	// false while the request is admitted.
	Allowed bool

	// Undecided marks a limit the store never asked, because a limit it
	// asked first rejected the request: on Redis Cluster, where limits in
	// different slots are decided slot by slot. It consumed nothing and
	// counts as admitting (Allowed); its Remaining and ResetAfter are
	// unknown and read zero.
	Undecided bool

	// Local marks a rejection the store answered from its memory of a key
	// it knew to be exhausted, without asking where the counters live (the
	// Redis store's local rejects). It reads as any other rejection.
	Local bool

	// Limit is the count, burst or number in flight the rule admits.
	Limit int64

	// Remaining is what is left after this request: window slots, whole
	// tokens or free leases. Never negative.
	Remaining int64

	// ResetAfter is when the window ends (fixed), the oldest admission
	// leaves it (sliding) or the bucket is full again (token bucket).
	ResetAfter time.Duration

	// RetryAfter, on a rejection, is the shortest wait after which the
	// same request could be admitted.
	RetryAfter time.Duration

	// Delay is how long an admission queued by a token bucket must wait.
	Delay time.Duration
}

// State is one key's state as Peek reads it.
type State struct {
	Algorithm  Algorithm
	Limit      int64
	Window     time.Duration
	Remaining  int64 // never negative, even after the count was lowered
	ResetAfter time.Duration
	InFlight   int64 // Concurrency only
}
