package rehearse

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Second is one row of a load run's per-second series: the attempts whose
// scheduled send time fell in that second and what became of them. A row is
// final once every attempt in it has its outcome, so
// Sent = OK + TooMany + Unavailable + Other (+ Canceled, if the run was
// interrupted).
type Second struct {
	T           int   // seconds since the start
	Sent        int64 // attempts sent, retries included
	Retries     int64 // of Sent, the retries
	OK          int64 // answered 2xx
	TooMany     int64 // answered 429
	Unavailable int64 // answered 503
	Other       int64 // any other status, or no answer (Errors)
	Errors      int64 // of Other: no HTTP answer — a timeout, a refused or reset connection
	Canceled    int64 // cut short by the end of an interrupted run
	Dropped     int64 // not sent: the concurrency cap was reached
	// OtherBy breaks Other down by what each attempt was: its status
	// ("504") or, without an answer, "err:" and the kind of its error
	// ("err:timeout"). Nil when Other is zero.
	OtherBy Breakdown
	// P50 and P99 are the latencies of the second's attempts, from each
	// attempt's scheduled send time to the end of its answer (or its
	// error). Zero when no attempt has one.
	P50, P99 time.Duration
}

// add adds the counts of o to s.
func (s *Second) add(o *Second) {
	s.Sent += o.Sent
	s.Retries += o.Retries
	s.OK += o.OK
	s.TooMany += o.TooMany
	s.Unavailable += o.Unavailable
	s.Other += o.Other
	s.Errors += o.Errors
	for k, n := range o.OtherBy {
		if s.OtherBy == nil {
			s.OtherBy = make(Breakdown, len(o.OtherBy))
		}
		s.OtherBy[k] += n
	}
	s.Canceled += o.Canceled
	s.Dropped += o.Dropped
}

// A Breakdown counts attempts by what they were: a status ("504", "502"),
// or for an attempt without an answer "err:" and its kind: err:timeout,
// err:refused, err:reset, err:closed (the connection closed before the
// answer ended), err:other.
type Breakdown map[string]int64

// String formats b as "504:10 502:2 err:timeout:1", the largest count
// first (ties by name); "" when b is empty.
func (b Breakdown) String() string {
	var sb strings.Builder
	for i, k := range b.Keys() {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(k)
		sb.WriteByte(':')
		sb.WriteString(strconv.FormatInt(b[k], 10))
	}
	return sb.String()
}

// Keys returns b's keys in the order String writes them.
func (b Breakdown) Keys() []string {
	return slices.SortedFunc(maps.Keys(b), func(x, y string) int {
		return cmp.Or(cmp.Compare(b[y], b[x]), strings.Compare(x, y))
	})
}

// An outcome is how one attempt ended.
type outcome int

const (
	outcomeOK outcome = iota
	outcomeTooMany
	outcomeUnavailable
	outcomeOther
	outcomeError
	outcomeCanceled
)

func classify(status int) outcome {
	switch {
	case status >= 200 && status < 300:
		return outcomeOK
	case status == 429:
		return outcomeTooMany
	case status == 503:
		return outcomeUnavailable
	}
	return outcomeOther
}

// maxErrorKinds bounds the distinct error messages a run keeps.
const maxErrorKinds = 20

// A recorder keeps the per-second series of a run. Every attempt is filed
// under the second of its scheduled send time; a second is final, and
// handed out by ready, once three things hold: the clock has passed its
// end (no retry can be scheduled into it any more, as a retry is due no
// earlier than the answer it follows), the pacing loop has dispatched
// every request due in it (frontier), and none of its attempts is still
// open — in flight, or a retry waiting for its time. All times are offsets
// from the start of the run, passed in, so tests drive it without a clock.
type recorder struct {
	mu       sync.Mutex
	slots    []slot // by second
	emitted  int    // slots before this one are final
	frontier time.Duration
	free     []*Histogram
	total    Histogram
	errs     map[string]int64
	// succeeded counts requests, not attempts, whose last attempt was
	// answered 2xx.
	succeeded int64
	lastSend  time.Duration
}

type slot struct {
	row  Second
	open int
	hist *Histogram
}

func newRecorder() *recorder {
	return &recorder{errs: make(map[string]int64)}
}

// slot returns the slot of an attempt scheduled at. An attempt scheduled in
// a second already final — which takes a goroutine that measured the time
// just before a boundary and took the lock just after — is filed in the
// first open second instead.
func (r *recorder) slot(at time.Duration) *slot {
	i := max(int(at/time.Second), r.emitted)
	for len(r.slots) <= i {
		r.slots = append(r.slots, slot{row: Second{T: len(r.slots)}})
	}
	return &r.slots[i]
}

// advance records that the pacing loop has dispatched every request due
// before next.
func (r *recorder) advance(next time.Duration) {
	r.mu.Lock()
	r.frontier = next
	r.mu.Unlock()
}

// send records an attempt scheduled at and sent at sentAt. A first attempt
// opens its slot; a retry's slot was opened by reserve.
func (r *recorder) send(at, sentAt time.Duration, retry bool) {
	r.mu.Lock()
	s := r.slot(at)
	s.row.Sent++
	if retry {
		s.row.Retries++
	} else {
		s.open++
	}
	r.lastSend = max(r.lastSend, sentAt)
	r.mu.Unlock()
}

// drop records an attempt scheduled at that the concurrency cap turned
// away; reserved says whether it was a retry, whose slot reserve opened.
func (r *recorder) drop(at time.Duration, reserved bool) {
	r.mu.Lock()
	s := r.slot(at)
	s.row.Dropped++
	if reserved {
		s.open--
	}
	r.mu.Unlock()
}

// release closes the slot a retry scheduled at had reserved, when the run
// ends before the retry is sent.
func (r *recorder) release(at time.Duration) {
	r.mu.Lock()
	r.slot(at).open--
	r.mu.Unlock()
}

// finish records the outcome of the attempt scheduled at, with its
// latency; kind is what an attempt of outcomeOther or outcomeError was, as
// Breakdown counts it ("504", "err:timeout"), and errMsg names the error
// of outcomeError as the summary counts it. When retryAt is not negative,
// a retry is due then and its slot is opened in the same step, so that no
// second in between can be taken for final.
func (r *recorder) finish(at time.Duration, o outcome, latency time.Duration, kind, errMsg string, retryAt time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if retryAt >= 0 {
		r.slot(retryAt).open++
	}
	s := r.slot(at)
	s.open--
	switch o {
	case outcomeOK:
		s.row.OK++
		if retryAt < 0 {
			r.succeeded++
		}
	case outcomeTooMany:
		s.row.TooMany++
	case outcomeUnavailable:
		s.row.Unavailable++
	case outcomeOther:
		s.row.Other++
		s.row.countOther(kind)
	case outcomeError:
		s.row.Other++
		s.row.Errors++
		s.row.countOther(kind)
		if _, ok := r.errs[errMsg]; !ok && len(r.errs) >= maxErrorKinds {
			errMsg = "other errors"
		}
		r.errs[errMsg]++
	case outcomeCanceled:
		s.row.Canceled++
		return
	}
	if s.hist == nil {
		if n := len(r.free); n > 0 {
			s.hist, r.free = r.free[n-1], r.free[:n-1]
		} else {
			s.hist = new(Histogram)
		}
	}
	s.hist.Record(latency)
}

// countOther counts one attempt of Other as kind.
func (s *Second) countOther(kind string) {
	if s.OtherBy == nil {
		s.OtherBy = make(Breakdown, 2)
	}
	s.OtherBy[kind]++
}

// ready returns the seconds that have become final by now, in order.
func (r *recorder) ready(now time.Duration) []Second {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rows []Second
	for {
		end := time.Duration(r.emitted+1) * time.Second
		if end > now || end > r.frontier {
			return rows
		}
		if s := r.slot(end - 1); s.open > 0 {
			return rows
		}
		rows = append(rows, r.seal())
	}
}

// flush returns every second not yet final, at least up to second
// minRows-1, once the run is over and nothing is open.
func (r *recorder) flush(minRows int) []Second {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rows []Second
	for r.emitted < max(len(r.slots), minRows) {
		rows = append(rows, r.seal())
	}
	return rows
}

// seal makes the first open second final and returns its row. The caller
// holds r.mu.
func (r *recorder) seal() Second {
	s := r.slot(time.Duration(r.emitted) * time.Second)
	if h := s.hist; h != nil {
		s.row.P50, s.row.P99 = h.Quantile(0.5), h.Quantile(0.99)
		r.total.Merge(h)
		h.Reset()
		r.free = append(r.free, h)
		s.hist = nil
	}
	r.emitted++
	return s.row
}
