// Package usagepool keeps what outlives one configuration of the gateway
// across reloads: a connection pool, a circuit breaker, a store, a log
// sampler. It learns from Caddy's UsagePool: a value is kept under a key
// for as long as some configuration holds it, and destroyed when the last
// one lets go, so that a reload neither loses what it keeps (an open
// breaker, a warm connection) nor piles up what it no longer uses.
//
// A configuration holds what it uses through its Lease; a reload builds
// the new configuration, whose lease takes the values it shares with the
// running one, then releases the running one's lease: what only that one
// held is destroyed. A build that fails releases its own lease, which
// leaves the running configuration as it was.
package usagepool

import (
	"sync"
)

// Pool keeps values of type V by key. The zero value is not ready: New
// makes one.
type Pool[V any] struct {
	mu      sync.Mutex
	entries map[string]*entry[V]
	destroy func(key string, v V, replaced bool)
	keep    bool // a value no lease holds stays until Forget (NewKept)
}

type entry[V any] struct {
	key      string
	v        V
	refs     int
	replaced bool      // another value took its key; it is no longer the pool's
	forgot   bool      // Forget was called: it goes with its last lease, even in a kept pool
	prev     *entry[V] // the value it replaced, back under the key if this one goes first
}

// New returns a pool that calls destroy (if not nil) with each value no
// lease holds any longer, outside the pool's lock; replaced says another
// value has taken its key since it was made.
func New[V any](destroy func(key string, v V, replaced bool)) *Pool[V] {
	return &Pool[V]{entries: map[string]*entry[V]{}, destroy: destroy}
}

// NewKept is New for values that outlive the configurations that use
// them: one no lease holds stays under its key, for a later configuration
// to take up again, until Forget lets it go (a circuit breaker keeps its
// state while its route is out of the configuration).
func NewKept[V any](destroy func(key string, v V, replaced bool)) *Pool[V] {
	p := New(destroy)
	p.keep = true
	return p
}

// Forget lets the value kept under key go once no lease holds it (at
// once if none does), in a pool made by NewKept; in any other it changes
// nothing.
func (p *Pool[V]) Forget(key string) {
	p.mu.Lock()
	e := p.entries[key]
	if e == nil || !p.keep {
		p.mu.Unlock()
		return
	}
	e.forgot = true
	if e.refs > 0 {
		p.mu.Unlock()
		return
	}
	delete(p.entries, key)
	p.mu.Unlock()
	if p.destroy != nil {
		p.destroy(key, e.v, false)
	}
}

// Hold returns the value kept under key, for l to hold, made by make when
// there is none or when keep, if not nil, says the kept one will not do.
// make is given the value it replaces, if any (had), to carry its state
// over; the value replaced stays with the leases that hold it until they
// let go. make runs under the pool's lock: it must not use the pool.
func (p *Pool[V]) Hold(l *Lease, key string, keep func(V) bool, make func(prev V, had bool) (V, error)) (V, error) {
	p.mu.Lock()
	e := p.entries[key]
	if e == nil || keep != nil && !keep(e.v) {
		var prev V
		if e != nil {
			prev = e.v
		}
		v, err := make(prev, e != nil)
		if err != nil {
			p.mu.Unlock()
			return v, err
		}
		if e != nil {
			e.replaced = true
		}
		e = &entry[V]{key: key, v: v, prev: e}
		p.entries[key] = e
	}
	e.refs++
	e.forgot = false
	p.mu.Unlock()
	l.add(func() { p.release(e) })
	return e.v, nil
}

// release lets go of one hold of e, and destroys its value with the last.
func (p *Pool[V]) release(e *entry[V]) {
	p.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && !e.replaced && p.keep && !e.forgot {
		// Kept for the next configuration that takes it up.
		p.mu.Unlock()
		return
	}
	if last && !e.replaced {
		if pe := e.prev; pe != nil && pe.refs > 0 {
			// The value it replaced is still held (a build that made
			// this one failed, and the running one holds the old): it is
			// the key's again.
			pe.replaced = false
			p.entries[e.key] = pe
			e.replaced = true
		} else {
			delete(p.entries, e.key)
		}
	}
	if last {
		e.prev = nil
	}
	p.mu.Unlock()
	if last && p.destroy != nil {
		p.destroy(e.key, e.v, e.replaced)
	}
}

// Each calls f with each key and the value kept under it now, in no
// order, outside the pool's lock.
func (p *Pool[V]) Each(f func(key string, v V)) {
	p.mu.Lock()
	es := make([]*entry[V], 0, len(p.entries))
	for _, e := range p.entries {
		es = append(es, e)
	}
	p.mu.Unlock()
	for _, e := range es {
		f(e.key, e.v)
	}
}

// Len is the number of keys with a value kept.
func (p *Pool[V]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// A Lease is what one configuration holds, in any number of pools. The
// zero value holds nothing and is ready to use.
type Lease struct {
	mu       sync.Mutex
	releases []func()
	done     bool
}

func (l *Lease) add(release func()) {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		release() // held after the lease ended: let go at once
		return
	}
	l.releases = append(l.releases, release)
	l.mu.Unlock()
}

// Release lets go of everything l holds; the values no other lease holds
// are destroyed. Only the first call does anything.
func (l *Lease) Release() {
	l.mu.Lock()
	rs := l.releases
	l.releases, l.done = nil, true
	l.mu.Unlock()
	for _, r := range rs {
		r()
	}
}
