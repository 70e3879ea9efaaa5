// Package logsample keeps a flood from flooding the logs: a Sampler lets
// a few lines a second through and counts the rest, for one line a second
// that says how many were not logged.
package logsample

import (
	"sync"
)

// Sampler lets at most perSecond events through in each second and counts
// the rest, so that a flood of rejections cannot flood the log: 20 lines a
// second per route and limit, then one line a second with the count of
// those not logged (docs/configuration.md, Logs).
type Sampler struct {
	mu        sync.Mutex
	perSecond int
	sec       int64
	n         int
	dropped   int
}

// New returns a sampler of perSecond events a second.
func New(perSecond int) *Sampler { return &Sampler{perSecond: perSecond} }

// Allow reports whether an event in second now (Unix seconds) may be
// logged.
func (s *Sampler) Allow(now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now != s.sec {
		s.sec, s.n = now, 0
	}
	if s.n < s.perSecond {
		s.n++
		return true
	}
	s.dropped++
	return false
}

// TakeDropped returns and clears the count of events not logged.
func (s *Sampler) TakeDropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dropped
	s.dropped = 0
	return d
}
