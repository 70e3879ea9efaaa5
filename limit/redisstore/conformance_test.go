package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/limittest"
)

func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	limittest.Run(t, func(t *testing.T, realTime bool) *limittest.Harness {
		srv.Do(t, "FLUSHALL")
		return harness(t, open(t, srv), realTime, []*testredis.Server{srv})
	})
}

// harness is the conformance suite's view of s, whose state lives on
// nodes.
func harness(t *testing.T, s *Store, realTime bool, nodes []*testredis.Server) *limittest.Harness {
	ctx := context.Background()
	h := &limittest.Harness{
		Store: s,
		Now: func() time.Time {
			now, err := s.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return now
		},
		Set:       func(when time.Time) { at(t, s, when) },
		Tolerance: 50 * time.Millisecond,
		CheckExpiry: func(tb testing.TB) {
			for _, n := range nodes {
				n.CheckExpiry(tb)
			}
		},
		SlotGroups: s.mode == Cluster,
	}
	if realTime {
		h.Set = func(time.Time) { t.Fatal("Set on a real-time harness") }
		warmUp(t, s)
	}
	return h
}

// warmUp loads the script and opens the store's connections before an
// exactness test starts its clock: a first decision slowed by NOSCRIPT or a
// dial would leave a token bucket idle at its cap, and the suite's bound
// assumes the bucket never reaches it after the first decision.
func warmUp(t *testing.T, s *Store) {
	r := valid(t, &limit.Rule{Name: "warm-up", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Second}})
	var wg sync.WaitGroup
	for range limittest.Goroutines {
		wg.Go(func() {
			if _, err := s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: "k"}}, Now: time.Now()}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
