package answer

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// ceilSeconds rounds a duration up to whole seconds: every number of the
// rate-limit headers is rounded up to an integer.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// SetHeaders reports one limit's decision, named name, in both
// the IETF draft-ietf-httpapi-ratelimit-headers-11 fields and the older
// X-RateLimit-* ones. RESET is seconds from now, never an epoch time.
func SetHeaders(h http.Header, name string, d *limit.Decision) {
	v := new(headerValues)
	v.format(name, d)
	v.set(h)
}

// ReplaceHeaders is SetHeaders for a header map that already holds
// another's rate-limit headers (an upstream's, which a proxy copied): it
// first removes every RateLimit, RateLimit-* and X-RateLimit-* header, in
// any case, so that none of the other's is left beside the ones reported.
func ReplaceHeaders(h http.Header, name string, d *limit.Decision) {
	v := new(headerValues)
	v.format(name, d)
	v.replace(h)
}

// headerValues are the values of the five headers SetHeaders sets, in the
// order set sets them.
type headerValues [5]string

func (v *headerValues) format(name string, d *limit.Decision) {
	quota := d.Limit
	window := ceilSeconds(d.Rule.Window())
	remaining := d.Remaining
	reset := ceilSeconds(d.ResetAfter)

	// Every value is a piece of one string, and the five header slices
	// share one array, v (each capped by set, so that adding to one header
	// cannot overwrite the next): one allocation here, and one for v, for
	// the five headers.
	b := make([]byte, 0, 128)
	var cut [5]int
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `";q=`...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, window, 10)
	cut[0] = len(b)
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `";r=`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	cut[1] = len(b)
	b = strconv.AppendInt(b, quota, 10)
	cut[2] = len(b)
	b = strconv.AppendInt(b, remaining, 10)
	cut[3] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	cut[4] = len(b)
	s := string(b)
	from := 0
	for i, to := range cut {
		v[i], from = s[from:to], to
	}
}

func (v *headerValues) set(h http.Header) {
	h["Ratelimit-Policy"] = v[0:1:1]
	h["Ratelimit"] = v[1:2:2]
	h["X-Ratelimit-Limit"] = v[2:3:3]
	h["X-Ratelimit-Remaining"] = v[3:4:4]
	h["X-Ratelimit-Reset"] = v[4:5:5]
}

// replace makes v the only rate-limit headers of h: besides the five set
// sets, it removes the rest of their family a handler may send — the
// RateLimit-Limit, -Remaining and -Reset of the draft's earlier versions,
// X-RateLimit-Used and the like — which would describe another limit than
// the one reported. Names in any case count: a handler may write to the
// map without canonicalizing them.
func (v *headerValues) replace(h http.Header) {
	RemoveHeaders(h)
	v.set(h)
}

// RemoveHeaders removes every RateLimit, RateLimit-* and X-RateLimit-*
// header from h, in any case: an upstream's, from an answer that passes
// on without the gateway's own (an informational one, which comes before
// the gateway reports its limits).
func RemoveHeaders(h http.Header) {
	for k := range h {
		if rateLimitHeader(k) {
			delete(h, k)
		}
	}
}

// rateLimitHeader reports whether name, in any case, is RateLimit or
// X-RateLimit, or one of them followed by a dash and more.
func rateLimitHeader(name string) bool {
	if len(name) >= 2 && (name[0] == 'X' || name[0] == 'x') && name[1] == '-' {
		name = name[2:]
	}
	const rl = "ratelimit"
	return len(name) >= len(rl) && strings.EqualFold(name[:len(rl)], rl) &&
		(len(name) == len(rl) || name[len(rl)] == '-')
}

// Reported returns which of a request's decisions the rate-limit headers
// report: on a rejection the one that gave the status, rejectedBy; on an
// admission (rejectedBy < 0) the one with the smallest remaining share of
// its quota, the first on a tie, leaving out limits a cluster never asked.
// reportable says which limits may be reported at all (not those with
// headers off, nor concurrency limits); -1 means none.
func Reported(ds []limit.Decision, rejectedBy int, reportable func(i int) bool) int {
	if rejectedBy >= 0 {
		if reportable(rejectedBy) {
			return rejectedBy
		}
		return -1
	}
	best, share := -1, 2.0
	for i := range ds {
		d := &ds[i]
		if !reportable(i) || d.Limit <= 0 || d.Undecided {
			continue
		}
		if s := float64(d.Remaining) / float64(d.Limit); s < share {
			best, share = i, s
		}
	}
	return best
}

// RetryAfter is how long a rejected request should wait: the longest wait
// among the limits that rejected it, shadow limits aside.
func RetryAfter(ds []limit.Decision) time.Duration {
	var wait time.Duration
	for i := range ds {
		if d := &ds[i]; !d.Allowed && !d.Rule.Shadow {
			wait = max(wait, d.RetryAfter)
		}
	}
	return wait
}

// SetRetryAfter sets Retry-After to d rounded up, at least one second.
func SetRetryAfter(h http.Header, d time.Duration) {
	h["Retry-After"] = RetryAfterValue(d)
}
