package upstream

import (
	"sync"
	"time"
)

// Upgrades are the requests that switched protocols and whose connections
// are joined to their upstream's. A graceful shutdown does not wait for
// them (the server no longer tracks a connection it handed over), so the
// gateway closes them when it closes, and waits for their handlers, which
// release their concurrency leases, before it closes the store.
type Upgrades struct {
	mu     sync.Mutex
	open   map[*joined]struct{}
	closed bool
	wg     sync.WaitGroup // handlers of upgrade requests, until they return
}

// joined is one pair of joined connections; stop closes both.
type joined struct{ stop func() }

// Enter counts the handler of an upgrade request, for Close to wait for,
// and Leave is called when it returns; once the gateway is closing, Enter
// reports false and counts nothing (the handler's switch will be refused).
func (u *Upgrades) Enter() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Add(1)
	return true
}

func (u *Upgrades) Leave() { u.wg.Done() }

// add registers j, or reports false when the gateway is closing and j
// must not start.
func (u *Upgrades) add(j *joined) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	if u.open == nil {
		u.open = make(map[*joined]struct{})
	}
	u.open[j] = struct{}{}
	return true
}

func (u *Upgrades) remove(j *joined) {
	u.mu.Lock()
	delete(u.open, j)
	u.mu.Unlock()
}

// Close stops every joined pair and waits up to wait for their handlers.
func (u *Upgrades) Close(wait time.Duration) {
	u.mu.Lock()
	u.closed = true
	for j := range u.open {
		j.stop()
	}
	u.mu.Unlock()
	done := make(chan struct{})
	go func() {
		u.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
	}
}
