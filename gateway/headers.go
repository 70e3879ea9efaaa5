package gateway

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// ceilSeconds rounds a duration up to whole seconds (SPEC §4.3: "all
// rounded up to integers").
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// setRateLimitHeaders reports one limit's decision, named name, in both
// the IETF draft-ietf-httpapi-ratelimit-headers-11 fields and the older
// X-RateLimit-* ones. RESET is seconds from now, never an epoch time.
func setRateLimitHeaders(h http.Header, name string, d *limit.Decision) {
	quota := d.Limit
	window := ceilSeconds(d.Rule.Window())
	remaining := d.Remaining
	reset := ceilSeconds(d.ResetAfter)

	b := make([]byte, 0, 64)
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `";q=`...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, window, 10)
	n := len(b)
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `";r=`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	s := string(b)
	h["Ratelimit-Policy"] = []string{s[:n]}
	h["Ratelimit"] = []string{s[n:]}
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(quota, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(remaining, 10)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
}

// setRetryAfter sets Retry-After to d rounded up, at least one second.
func setRetryAfter(h http.Header, d time.Duration) {
	h["Retry-After"] = []string{strconv.FormatInt(max(ceilSeconds(d), 1), 10)}
}

// reported picks the decision the headers report (SPEC §4.3): on a
// rejection the one that gave the status, on an admission the one with the
// smallest remaining share, the first on a tie. Limits with headers off
// and concurrency limits are never reported; -1 means none.
func reported(specs []*limitSpec, ds []limit.Decision, rejectedBy int) int {
	if rejectedBy >= 0 {
		if specs[rejectedBy].reportable() {
			return rejectedBy
		}
		return -1
	}
	best, bestShare := -1, 2.0
	for i := range ds {
		if !specs[i].reportable() || ds[i].Limit <= 0 {
			continue
		}
		share := float64(ds[i].Remaining) / float64(ds[i].Limit)
		if share < bestShare {
			best, bestShare = i, share
		}
	}
	return best
}
