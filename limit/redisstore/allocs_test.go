package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// decideAllocs is the most allocations Decide may make for a request of
// four fixed windows, two of whose keys change from request to request,
// with the decisions' array given (Request.Into): rueidis's array for the
// reply. batchAllocs is the same for a request that queues and goes out
// in a batch of its own, the batcher's goroutine included: the reply's
// array, the batch's slice of waiters, the closure of the goroutine that
// sends it and its context's link to the store's, all of which a batch
// of many requests shares. Lower them as allocations are removed.
const (
	decideAllocs = 1
	batchAllocs  = 4
)

// TestDecideAllocs pins what a decision allocates on the way every
// decision of an idle gateway takes: through the batcher, sent at once as
// its own call; and on the way of a busy one's: queued, and sent in a
// batch.
func TestDecideAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled values")
	}
	s := open(t, testredis.Start(t), remoteOnly)
	fixed := func(name string) *limit.Rule {
		return valid(t, &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Minute}})
	}
	global, api, user, ip := fixed("global"), fixed("api"), fixed("user"), fixed("ip")
	keys := make([]limit.Key, 64)
	for i := range keys {
		keys[i] = limit.NewKey(limit.Part{Kind: "ip", Value: "10.0.0." + strconv.Itoa(i)})
	}
	var into [4]limit.Decision
	req := &limit.Request{Into: into[:], Limits: []limit.Limit{
		{Rule: global, Key: limit.NewKey(limit.Part{Kind: "global"})},
		{Rule: api, Key: limit.NewKey(limit.Part{Kind: "route", Value: "api"})},
		{Rule: user, Key: keys[0]},
		{Rule: ip, Key: keys[0]},
	}}
	ctx := context.Background()
	i := 0
	decide := func() {
		i++
		req.Limits[2].Key, req.Limits[3].Key = keys[i%len(keys)], keys[(i+1)%len(keys)]
		req.Now = time.Now()
		if res, err := s.Decide(ctx, req); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	for range 10 {
		decide()
	}
	if n := testing.AllocsPerRun(200, decide); n > decideAllocs {
		t.Errorf("Decide made %v allocations, want at most %d", n, decideAllocs)
	}

	// Queued: the calls in flight are all taken, and "one returns" once
	// the decision is queued.
	c := client(t, s)
	kick := make(chan struct{})
	defer close(kick)
	go func() {
		for range kick {
			for {
				s.batch.mu.Lock()
				n := len(s.batch.queue)
				s.batch.mu.Unlock()
				if n > 0 {
					break
				}
				runtime.Gosched()
			}
			s.next(c)
		}
	}()
	queued := func() {
		s.batch.mu.Lock()
		s.batch.flying = maxFlying
		s.batch.mu.Unlock()
		kick <- struct{}{}
		decide()
	}
	before := s.batch.batched.Load()
	for range 10 {
		queued()
	}
	if n := testing.AllocsPerRun(200, queued); n > batchAllocs {
		t.Errorf("a queued Decide made %v allocations, want at most %d", n, batchAllocs)
	}
	if got := s.batch.batched.Load() - before; got != 211 {
		t.Fatalf("%d decisions batched, want 211", got)
	}
}
