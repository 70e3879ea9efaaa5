package answer

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Header values made once.
//
// Every []string this file hands out may be assigned into many responses'
// header maps at once, and outlives the response: net/http reads the map
// after the handler returns. Nothing may write to such a slice's element,
// and each is capped at its one element, so that an append to it (a
// handler's Header().Add) makes a new array instead of writing past it.

// smallInts is how many integers, from 0, have their decimal form made in
// advance: every Retry-After, Reset and Content-Length below an hour and
// eight minutes, or 4 KiB.
const smallInts = 4096

// ints holds the decimal forms of 0 to smallInts-1, slices of one string.
var ints = func() *[smallInts]string {
	var t [smallInts]string
	b := make([]byte, 0, 5*smallInts)
	ends := make([]int, smallInts)
	for i := range t {
		b = strconv.AppendInt(b, int64(i), 10)
		ends[i] = len(b)
	}
	s, from := string(b), 0
	for i, to := range ends {
		t[i], from = s[from:to], to
	}
	return &t
}()

// intValue is n in decimal as a header value: a shared one for n below
// smallInts, a new one above.
func intValue(n int64) []string {
	if n >= 0 && n < smallInts {
		return ints[n : n+1 : n+1]
	}
	return []string{strconv.FormatInt(n, 10)}
}

// HeaderSet holds the values of the five headers SetHeaders sets, each a
// one-element slice capped at its length.
type HeaderSet struct {
	policy, rateLimit, limit, remaining, reset []string
}

// Set puts the values in h.
func (v *HeaderSet) Set(h http.Header) {
	h["Ratelimit-Policy"] = v.policy
	h["Ratelimit"] = v.rateLimit
	h["X-Ratelimit-Limit"] = v.limit
	h["X-Ratelimit-Remaining"] = v.remaining
	h["X-Ratelimit-Reset"] = v.reset
}

// Replace is Set for a header map that already holds another's
// rate-limit headers, as ReplaceHeaders is SetHeaders.
func (v *HeaderSet) Replace(h http.Header) {
	RemoveHeaders(h)
	v.Set(h)
}

// Reporter reports the decisions of one limit, named name, in the
// headers SetHeaders sets, with the same values; but it keeps what it
// formats. The quota and the window change only with the rule (an
// override's, or a local share's), so RateLimit-Policy and
// X-RateLimit-Limit are made once per rule; Remaining and Reset below
// 4096 are made once for the package; and the RateLimit field of a
// rejection, whose remaining count is nearly always 0, is made once per
// number of seconds to the reset. What a rejection reports therefore
// costs no allocation once the Reporter has seen its values, unless its
// reset is more than 4095 seconds away. A Reporter is safe for
// concurrent use.
type Reporter struct {
	name     string
	policies [policySlots]atomic.Pointer[policyValues]
	next     atomic.Uint32 // the policy slot a new rule takes
	// zero holds the RateLimit values with r=0, by their t: grown to
	// hold the largest t asked, up to smallInts.
	zero atomic.Pointer[[]atomic.Pointer[[1]string]]
}

// policySlots is how many rules' values a Reporter keeps: a limit's own,
// its overrides' and their local shares.
const policySlots = 8

// policyValues are the values of one quota and window.
type policyValues struct {
	quota, window int64
	policy        [1]string
	limit         []string
}

// NewReporter returns the Reporter of the limit named name.
func NewReporter(name string) *Reporter { return &Reporter{name: name} }

// Set is SetHeaders(h, name, d).
func (p *Reporter) Set(h http.Header, d *limit.Decision) {
	v := p.Values(d, nil)
	v.Set(h)
}

// Replace is ReplaceHeaders(h, name, d).
func (p *Reporter) Replace(h http.Header, d *limit.Decision) {
	v := p.Values(d, nil)
	v.Replace(h)
}

// Formatted holds the values of a decision that a Reporter does not keep:
// RateLimit, and Remaining and Reset when they are not small integers.
type Formatted [3]string

// Values are the header values of d. The values it formats, in one
// string, go in f, which the caller keeps for as long as the header map
// may be read; nil: a new one.
func (p *Reporter) Values(d *limit.Decision, f *Formatted) HeaderSet {
	quota, window := d.Limit, ceilSeconds(d.Rule.Window())
	remaining, reset := d.Remaining, ceilSeconds(d.ResetAfter)
	pv := p.policy(quota, window)
	v := HeaderSet{policy: pv.policy[:], limit: pv.limit}
	if remaining == 0 && small(reset) {
		v.rateLimit, v.remaining, v.reset = p.exhausted(reset), intValue(0), intValue(reset)
		return v
	}
	var buf [128]byte
	b := p.appendRateLimit(buf[:0], remaining, reset)
	var cut [3]int
	cut[0] = len(b)
	if !small(remaining) {
		b = strconv.AppendInt(b, remaining, 10)
	}
	cut[1] = len(b)
	if !small(reset) {
		b = strconv.AppendInt(b, reset, 10)
	}
	cut[2] = len(b)
	str := string(b)
	if f == nil {
		f = new(Formatted)
	}
	from := 0
	for i, to := range cut {
		f[i], from = str[from:to], to
	}
	v.rateLimit, v.remaining, v.reset = f[0:1:1], f[1:2:2], f[2:3:3]
	if small(remaining) {
		v.remaining = ints[remaining : remaining+1 : remaining+1]
	}
	if small(reset) {
		v.reset = ints[reset : reset+1 : reset+1]
	}
	return v
}

func small(n int64) bool { return n >= 0 && n < smallInts }

func (p *Reporter) policy(quota, window int64) *policyValues {
	for i := range p.policies {
		pv := p.policies[i].Load()
		if pv == nil {
			break
		}
		if pv.quota == quota && pv.window == window {
			return pv
		}
	}
	pv := &policyValues{quota: quota, window: window, limit: intValue(quota)}
	var buf [128]byte
	b := append(buf[:0], '"')
	b = append(b, p.name...)
	b = append(b, `";q=`...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, window, 10)
	pv.policy[0] = string(b)
	// The first free slot, or, once all are taken, each in turn; two
	// that race for one keep either's values, which are both right.
	for i := range p.policies {
		if p.policies[i].CompareAndSwap(nil, pv) {
			return pv
		}
	}
	p.policies[p.next.Add(1)%policySlots].Store(pv)
	return pv
}

// exhausted is the RateLimit value of r=0 and t=reset, a small integer.
func (p *Reporter) exhausted(reset int64) []string {
	t := p.zero.Load()
	if t == nil || reset >= int64(len(*t)) {
		t = p.grow(reset)
	}
	slot := &(*t)[reset]
	v := slot.Load()
	if v == nil {
		var buf [128]byte
		v = &[1]string{string(p.appendRateLimit(buf[:0], 0, reset))}
		slot.Store(v)
	}
	return v[:]
}

// grow makes the table of RateLimit values with r=0 hold t: the next
// power of two above it, so that the table grows a few times at most.
// Values another request adds to the old table meanwhile are made again
// when they are next asked.
func (p *Reporter) grow(t int64) *[]atomic.Pointer[[1]string] {
	for {
		old := p.zero.Load()
		if old != nil && t < int64(len(*old)) {
			return old
		}
		n := 16
		for int64(n) <= t {
			n <<= 1
		}
		n = min(n, smallInts)
		table := make([]atomic.Pointer[[1]string], n)
		if old != nil {
			for i := range *old {
				table[i].Store((*old)[i].Load())
			}
		}
		if p.zero.CompareAndSwap(old, &table) {
			return &table
		}
	}
}

func (p *Reporter) appendRateLimit(b []byte, remaining, reset int64) []byte {
	b = append(b, '"')
	b = append(b, p.name...)
	b = append(b, `";r=`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, reset, 10)
}

// RetryAfterValue is the Retry-After value of a wait of d: d rounded up,
// at least one second.
func RetryAfterValue(d time.Duration) []string {
	return intValue(max(ceilSeconds(d), 1))
}
