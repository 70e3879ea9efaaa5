package gateway

import "github.com/floodgate-gw/floodgate/limit"

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
