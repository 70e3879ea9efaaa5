package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// New fails only on invalid options. While Redis cannot be reached, the
// store keeps connecting in the background and every call fails at once
// with an error that wraps limit.ErrStoreUnavailable, the signal for the
// caller's on_error policy.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Options{
		Addrs:   []string{"127.0.0.1:1"}, // nothing listens here
		Timeout: 50 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	user := &limit.Rule{Name: "coupon:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}}
	_, err = store.Decide(context.Background(), &limit.Request{
		Now:    time.Now(),
		Limits: []limit.Limit{{Rule: user, Key: limit.StringKey("42")}},
	})
	fmt.Println(errors.Is(err, limit.ErrStoreUnavailable))
	// Output: true
}

// Every limit of a request is decided in one script call, on Redis's
// clock: the request is admitted only if every limit admits it.
func ExampleStore_Decide() {
	store, err := redisstore.New(redisstore.Options{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	user := &limit.Rule{Name: "coupon:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}}
	api := &limit.Rule{Name: "coupon:api", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 800, Period: time.Second}}
	res, err := store.Decide(context.Background(), &limit.Request{
		Now: time.Now(),
		Limits: []limit.Limit{
			{Rule: user, Key: limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "42"})},
			{Rule: api, Key: limit.NewKey()},
		},
	})
	switch {
	case errors.Is(err, limit.ErrStoreUnavailable):
		fmt.Println("store unavailable: apply on_error")
	case err != nil:
		log.Fatal(err)
	case !res.Allowed:
		fmt.Println("rejected; retry after", res.Decisions[0].RetryAfter)
	default:
		fmt.Println("admitted at", res.Time)
	}
}
