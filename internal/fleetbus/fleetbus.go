package fleetbus

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
)

// Conn is what the bus takes from the store it rides on: a
// *redisstore.Store, whose methods of these names say what each gives.
type Conn interface {
	// Client returns the Redis client, or an error that wraps
	// limit.ErrStoreUnavailable and names op.
	Client(op string) (rueidis.Client, error)

	// Prefix starts every key and channel.
	Prefix() string

	// Timeout is the budget of one call.
	Timeout() time.Duration

	// Go runs f on a goroutine until the store closes, which waits for
	// it; a closed store runs nothing and returns an error that wraps
	// limit.ErrStoreUnavailable.
	Go(op string, f func(life context.Context)) error
}

// Bus is the fleet bus of the instances that share a store. Create it
// with New; it is safe for concurrent use, and lives as long as the store
// (it has no Close of its own).
type Bus struct {
	conn    Conn
	prefix  string
	timeout time.Duration

	// offset is added to Redis TIME by breaker.lua, in µs. Only tests
	// change it.
	offset atomic.Int64
}

// New returns the bus of the instances that share the store c.
func New(c Conn) *Bus {
	return &Bus{conn: c, prefix: c.Prefix(), timeout: c.Timeout()}
}

// changeTimeout is the least time a change is given: it is an operator's
// call, not a request's decision, and an answer lost to a short timeout
// leaves unknown whether the change was made.
const changeTimeout = 2 * time.Second

// A subscription that breaks is made again after a backoff that stays
// short: the store's own (redisstore's forget channel) does the same.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// unavailableError is how every failure to get an answer from Redis
// reaches the caller: errors.Is matches both limit.ErrStoreUnavailable, so
// that the caller applies its on_error policy, and the cause.
//
// Its message, and those of the bus's other errors, start with
// "redisstore:", as they did when the bus was part of the store, so that
// the logs and the admin answers that quote them read the same.
type unavailableError struct {
	op    string
	cause error
}

func (e *unavailableError) Error() string {
	return "redisstore: " + e.op + ": " + limit.ErrStoreUnavailable.Error() + ": " + e.cause.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{limit.ErrStoreUnavailable, e.cause} }

func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{op: op, cause: err}
}
