package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// Several limits on one request are decided together: the request is
// admitted only if every limit admits it, and a rejection consumes nothing.
func Example() {
	store := memory.New(memory.Options{})
	defer store.Close()

	user := &limit.Rule{Name: "coupon:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}}
	api := &limit.Rule{Name: "coupon:api", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 800, Period: time.Second}}
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

	for i := range 3 {
		res, err := store.Decide(context.Background(), &limit.Request{
			Now: now,
			Limits: []limit.Limit{
				{Rule: user, Key: limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "42"})},
				{Rule: api, Key: limit.NewKey()},
			},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed=%v user remaining=%d api remaining=%d retry after=%v\n",
			i, res.Allowed, res.Decisions[0].Remaining, res.Decisions[1].Remaining, res.Decisions[0].RetryAfter)
	}
	// Output:
	// request 0: allowed=true user remaining=0 api remaining=799 retry after=0s
	// request 1: allowed=false user remaining=0 api remaining=799 retry after=10s
	// request 2: allowed=false user remaining=0 api remaining=799 retry after=10s
}

// Peek reads a key's state without consuming it; Reset forgets it.
func ExampleStore_peek() {
	store := memory.New(memory.Options{})
	defer store.Close()
	ctx := context.Background()
	rule := &limit.Rule{Name: "login:ip", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 5, Period: time.Minute}}
	key := limit.NewKey(limit.Part{Kind: "ip", Value: "203.0.113.7"})
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

	for range 2 {
		store.Decide(ctx, &limit.Request{Now: now, Limits: []limit.Limit{{Rule: rule, Key: key}}})
	}
	s, _ := store.Peek(ctx, now.Add(15*time.Second), rule, key)
	fmt.Printf("%v: %d of %d left, the oldest leaves in %v\n", s.Algorithm, s.Remaining, s.Limit, s.ResetAfter)

	store.Reset(ctx, rule, key)
	s, _ = store.Peek(ctx, now.Add(15*time.Second), rule, key)
	fmt.Printf("after reset: %d of %d left\n", s.Remaining, s.Limit)
	// Output:
	// sliding_window: 3 of 5 left, the oldest leaves in 45s
	// after reset: 5 of 5 left
}

// A rate is written as in the configuration.
func ExampleParseRate() {
	for _, s := range []string{"800/s", "1/10s", "100/min", "100:60"} {
		r, _ := limit.ParseRate(s)
		fmt.Printf("%-8s %d per %v\n", s, r.Count, r.Period)
	}
	// Output:
	// 800/s    800 per 1s
	// 1/10s    1 per 10s
	// 100/min  100 per 1m0s
	// 100:60   100 per 1m0s
}
