package yamlnode

// Suggest returns the known key closest to a misspelt one, for a "did you
// mean" hint, or "" when none is close: within an edit distance of 2 and of
// half the name's length, so that a short name is not "corrected" into an
// unrelated one. Of equally close keys, the first in known wins; a caller
// whose keys have no order of their own sorts them, so that the hint does
// not change from run to run.
func Suggest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if bestD > len(name)/2 {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b. A string longer than
// any key is far from every key, and is not measured: the cost is the
// product of the lengths, and the name comes from the file.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
