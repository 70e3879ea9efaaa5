package answer

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// reporterCases are decisions of every shape a Reporter meets: rejections
// with no quota left, of every wait up to past the shared values, and
// admissions, of rules with several quotas and windows.
func reporterCases() []limit.Decision {
	var ds []limit.Decision
	for q := int64(1); q <= 12; q++ {
		r := &limit.Rule{Name: "r" + strconv.FormatInt(q, 10), Algorithm: limit.FixedWindow,
			Rate: limit.Rate{Count: q, Period: time.Duration(q) * 7 * time.Minute}}
		for _, reset := range []time.Duration{0, 1, time.Second, 1500 * time.Millisecond, time.Minute,
			time.Hour, (smallInts - 1) * time.Second, smallInts * time.Second, 24 * time.Hour} {
			for _, remaining := range []int64{0, 1, q, smallInts, 1 << 40} {
				ds = append(ds, limit.Decision{Rule: r, Limit: q, Remaining: remaining, ResetAfter: reset})
			}
		}
	}
	return ds
}

// A Reporter sets what SetHeaders sets, byte for byte, also when it has
// its values already and when its rules are more than it keeps.
func TestReporterIsSetHeaders(t *testing.T) {
	p := NewReporter(`lim:"it"`)
	for round := range 2 {
		for _, d := range reporterCases() {
			want, got, gotReplaced := http.Header{}, http.Header{}, http.Header{"X-Ratelimit-Used": {"3"}, "Link": {"x"}}
			SetHeaders(want, p.name, &d)
			p.Set(got, &d)
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("round %d, %+v: Set made %q, SetHeaders %q", round, d, got, want)
			}
			p.Replace(gotReplaced, &d)
			want["Link"] = []string{"x"}
			if !maps.EqualFunc(gotReplaced, want, slices.Equal) {
				t.Fatalf("round %d, %+v: Replace made %q, want %q", round, d, gotReplaced, want)
			}
			for k, vv := range got {
				if len(vv) != 1 || cap(vv) != 1 {
					t.Fatalf("%s: a value of length %d and capacity %d, which an append would write past", k, len(vv), cap(vv))
				}
			}
		}
	}
}

// A handler that adds to a shared value changes no other response's.
func TestSharedValuesStay(t *testing.T) {
	p := NewReporter("api")
	d := limit.Decision{Rule: &limit.Rule{Name: "api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Minute}},
		Limit: 5, ResetAfter: 30 * time.Second}
	h := http.Header{}
	p.Set(h, &d)
	SetRetryAfter(h, 7*time.Second)
	for k := range h {
		h.Add(k, "more")
	}
	h2 := http.Header{}
	p.Set(h2, &d)
	SetRetryAfter(h2, 7*time.Second)
	want := http.Header{
		"Ratelimit-Policy": {`"api";q=5;w=60`}, "Ratelimit": {`"api";r=0;t=30`}, "X-Ratelimit-Limit": {"5"},
		"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}, "Retry-After": {"7"},
	}
	if !maps.EqualFunc(h2, want, slices.Equal) {
		t.Fatalf("after another response's Add: %q, want %q", h2, want)
	}
}

func TestRetryAfterValues(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 1, time.Second, time.Second + 1, 59 * time.Minute, 2 * time.Hour, 48 * time.Hour} {
		h := http.Header{}
		SetRetryAfter(h, d)
		want := strconv.FormatInt(max(ceilSeconds(d), 1), 10)
		if got := h["Retry-After"]; len(got) != 1 || got[0] != want || cap(got) != 1 {
			t.Errorf("SetRetryAfter(%v) = %q (capacity %d), want %q", d, got, cap(got), want)
		}
	}
}

func TestReporterConcurrent(t *testing.T) {
	p := NewReporter("c")
	ds := reporterCases()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 4 * len(ds) {
				d := &ds[(i*(g+1))%len(ds)]
				got, want := http.Header{}, http.Header{}
				p.Set(got, d)
				SetHeaders(want, "c", d)
				if !maps.EqualFunc(got, want, slices.Equal) {
					t.Errorf("%+v: %q, want %q", d, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Write sends what Body and SetAnswerHeaders make.
func TestAnswerWrite(t *testing.T) {
	long := string(make([]byte, 5000))
	for _, a := range []*Answer{
		NewAnswer(429, "rate_limited", "Too many requests"),
		NewAnswer(503, "x", `a "quoted" message`+long),
	} {
		for _, extra := range []string{"", `,"recorded":true`} {
			for range 3 {
				w := httptest.NewRecorder()
				a.Write(w, "abc-123", extra)
				body := a.Body("abc-123", extra)
				want := http.Header{}
				SetAnswerHeaders(want, len(body))
				if w.Code != a.Status || w.Body.String() != string(body) || !maps.EqualFunc(w.Header(), want, slices.Equal) {
					t.Fatalf("Write sent %d %q %q, want %d %q %q", w.Code, w.Header(), w.Body, a.Status, want, body)
				}
				if got := w.Header()["Content-Length"][0]; got != strconv.Itoa(len(body)) {
					t.Fatalf("Content-Length %s for a body of %d bytes", got, len(body))
				}
			}
		}
	}
}

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// A rejection's answer and headers cost no allocation once the values
// it reports have been reported before.
func TestRejectionAllocatesNothing(t *testing.T) {
	a := NewAnswer(429, "rate_limited", "Too many requests")
	p := NewReporter("user")
	d := limit.Decision{Rule: &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Hour}},
		Limit: 1, ResetAfter: 3599 * time.Second, RetryAfter: 3599 * time.Second}
	w := &nopWriter{h: http.Header{}}
	answer := func() {
		p.Set(w.h, &d)
		SetRetryAfter(w.h, d.RetryAfter)
		a.Write(w, "0123456789abcdef-1", "")
	}
	answer()
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers")
	}
	if n := testing.AllocsPerRun(100, answer); n != 0 {
		t.Fatalf("a rejection made %v allocations", n)
	}
}

// A new request id, as a header value, is what Next makes: one string
// of the prefix and the counter, in one allocation.
func TestNextValue(t *testing.T) {
	s := NewIDSource()
	a, b := s.nextValue(), s.nextValue()
	if len(a) != 1 || cap(a) != 1 || a[0] != s.Prefix()+"1" || b[0] != s.Prefix()+"2" || !WellFormedID(a[0]) {
		t.Fatalf("ids %q and %q of prefix %q", a, b, s.Prefix())
	}
	if n := testing.AllocsPerRun(100, func() { s.nextValue() }); n != 1 {
		t.Fatalf("a new id took %v allocations", n)
	}
	var zero IDSource
	long := &IDSource{prefix: string(make([]byte, 40))}
	if v := zero.nextValue(); v[0] != "1" {
		t.Fatalf("a zero source's id %q", v)
	}
	if v := long.nextValue(); v[0] != long.prefix+"1" {
		t.Fatalf("a long prefix's id %q", v)
	}
}
