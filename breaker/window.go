package breaker

// window counts the calls of the last len(buckets) seconds, one bucket per
// second, reused in a ring so that recording a call never allocates.
//
// The ring holds the seconds (head-len, head]; a bucket with calls always
// holds one of them, at index sec mod len. Running totals make recording
// and the threshold check O(1); moving head forward clears the buckets that
// fell out, at most len of them however far it moves.
type window struct {
	buckets               []bucket
	head                  int64
	calls, failures, slow int64
}

type bucket struct {
	sec                   int64
	calls, failures, slow int64
}

func newWindow(n int) window { return window{buckets: make([]bucket, n)} }

func (w *window) index(sec int64) int {
	n := int64(len(w.buckets))
	return int((sec%n + n) % n) // seconds before the origin are negative
}

// reset empties the window, its newest second being sec.
func (w *window) reset(sec int64) {
	clear(w.buckets)
	w.head, w.calls, w.failures, w.slow = sec, 0, 0, 0
}

// advance moves the newest second to sec, dropping what fell out.
func (w *window) advance(sec int64) {
	if sec <= w.head {
		return
	}
	if sec-w.head >= int64(len(w.buckets)) {
		w.reset(sec)
		return
	}
	for s := w.head + 1; s <= sec; s++ {
		bk := &w.buckets[w.index(s)]
		w.calls -= bk.calls
		w.failures -= bk.failures
		w.slow -= bk.slow
		*bk = bucket{sec: s}
	}
	w.head = sec
}

// add records one call that ended in second sec. A call that ended before
// the window (its report came later than the window is long) is dropped: it
// says nothing of the window's seconds.
func (w *window) add(sec int64, failed, slow bool) {
	w.advance(sec)
	if w.head-sec >= int64(len(w.buckets)) {
		return
	}
	bk := &w.buckets[w.index(sec)]
	bk.sec = sec
	bk.calls++
	w.calls++
	if failed {
		bk.failures++
		w.failures++
	}
	if slow {
		bk.slow++
		w.slow++
	}
}

// at returns the window's counts as they would be at second sec, without
// moving it.
func (w *window) at(sec int64) (calls, failures, slow int64) {
	if sec <= w.head {
		return w.calls, w.failures, w.slow
	}
	from := sec - int64(len(w.buckets)) // seconds after this are in the window
	for _, bk := range w.buckets {
		if bk.sec > from && bk.calls > 0 {
			calls += bk.calls
			failures += bk.failures
			slow += bk.slow
		}
	}
	return calls, failures, slow
}
