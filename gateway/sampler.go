package gateway

import (
	"sync"
)

// sampler lets at most perSecond events through in each second and counts
// the rest, so that a flood of rejections cannot flood the log: 20 lines a
// second per route and limit, then one line a second with the count of
// those not logged (docs/configuration.md, Logs).
type sampler struct {
	mu        sync.Mutex
	perSecond int
	sec       int64
	n         int
	dropped   int
}

func newSampler(perSecond int) *sampler { return &sampler{perSecond: perSecond} }

// allow reports whether an event in second now may be logged.
func (s *sampler) allow(now int64) bool {
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

// takeDropped returns and clears the count of events not logged.
func (s *sampler) takeDropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dropped
	s.dropped = 0
	return d
}
