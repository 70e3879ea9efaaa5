// Package leases keeps concurrency leases (limit.Concurrency) alive while
// the request they count runs, for the gateway and for events replay.
package leases

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Hold renews the concurrency leases that lease holds on leases in store
// while the work they count runs (an answer may stream for longer than a
// lease lives), and returns the function that releases them once it is
// done. The release is sent even when the decision timed out: the lease
// id is the caller's own, and releasing an absent lease is harmless. log
// receives the renewals and releases that fail; now is the clock the
// store decides by.
func Hold(log *slog.Logger, now func() time.Time, store limit.Store, lease string, leases []limit.Limit) func() {
	ttl := leases[0].Rule.LeaseTTL
	for _, l := range leases[1:] {
		ttl = min(ttl, l.Rule.LeaseTTL)
	}
	if ttl <= 0 {
		ttl = limit.DefaultLeaseTTL
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if err := store.Renew(ctx, now(), lease, leases...); err != nil {
					log.Warn("renewing a concurrency lease failed", "lease", lease, "error", err.Error())
				}
				cancel()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := store.Release(ctx, lease, leases...); err != nil {
			log.Warn("releasing a concurrency lease failed; it expires on its own", "lease", lease, "error", err.Error())
		}
	}
}
