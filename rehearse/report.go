package rehearse

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The per-second table: one line per second, latencies in milliseconds,
// then what the second's other answers were, when it had any.
const (
	lineHeader = "%4s %7s %7s %7s %7s %7s %9s %9s  %s\n"
	lineFormat = "%4d %7d %7d %7d %7d %7d %9s %9s"
)

// WriteHeader writes the heading of the per-second table.
func WriteHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, lineHeader, "t", "sent", "2xx", "429", "503", "other", "p50", "p99", "other was")
	return err
}

// WriteSecond writes s as a line of the per-second table: its counts and
// latencies, and its other answers by status and error kind, as
// "504:10 502:2 err:timeout:1".
func WriteSecond(w io.Writer, s Second) error {
	n := s.OK + s.TooMany + s.Unavailable + s.Other
	line := fmt.Sprintf(lineFormat, s.T, s.Sent, s.OK, s.TooMany, s.Unavailable, s.Other, msText(s.P50, n), msText(s.P99, n))
	if len(s.OtherBy) > 0 {
		line += "  " + s.OtherBy.String()
	}
	_, err := io.WriteString(w, line+"\n")
	return err
}

// msText formats d in milliseconds, or "-" when n attempts had none.
func msText(d time.Duration, n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(ms(d), 'f', 1, 64)
}

// WriteSummary writes r's totals in a few lines.
func WriteSummary(w io.Writer, r *Result) error {
	ew := &errWriter{w: w}
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	t := &r.Total
	status := "complete"
	if r.Interrupted {
		status = "interrupted"
	}
	p("\nsummary (%s, %.1fs)\n", status, r.Elapsed.Seconds())
	p("  requests   %d scheduled, %d sent (%d retries), %d dropped at the concurrency cap",
		r.Scheduled, t.Sent, t.Retries, t.Dropped)
	if t.Canceled > 0 {
		p(", %d canceled", t.Canceled)
	}
	p("\n")
	p("  answers    2xx %d   429 %d   503 %d   other %d (%d without an answer)\n",
		t.OK, t.TooMany, t.Unavailable, t.Other, t.Errors)
	if len(t.OtherBy) > 0 {
		p("  other      %s\n", t.OtherBy)
	}
	if t.Retries > 0 {
		p("  outcome    %d of %d requests answered 2xx in the end\n", r.Succeeded, r.Scheduled)
	}
	if n := t.OK + t.TooMany + t.Unavailable + t.Other; n > 0 {
		p("  latency    p50 %s   p90 %s   p99 %s   p99.9 %s   max %s (ms, from the scheduled send)\n",
			msText(t.P50, n), msText(r.P90, n), msText(t.P99, n), msText(r.P999, n), msText(r.Max, n))
	}
	p("  rate       offered %.1f/s   achieved %.1f/s   2xx %.1f/s\n", r.OfferedRate(), r.AchievedRate(), r.GoodRate())
	p("  send lag   p99 %.1f ms   max %.1f ms\n", ms(r.LagP99), ms(r.LagMax))
	kinds := slices.SortedFunc(maps.Keys(r.Errors), func(a, b string) int {
		return cmp.Or(cmp.Compare(r.Errors[b], r.Errors[a]), strings.Compare(a, b))
	})
	for i, k := range kinds {
		label := ""
		if i == 0 {
			label = "errors"
		}
		p("  %-10s %d × %s\n", label, r.Errors[k], k)
	}
	return ew.err
}

// errWriter keeps the first error of a run of writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

// csvHeader names the CSV columns: the table's, then what the table leaves
// out, then other's breakdown as the table writes it ("504:10 err:timeout:2").
var csvHeader = []string{"t", "sent", "2xx", "429", "503", "other", "p50_ms", "p99_ms", "retries", "dropped", "errors", "canceled", "other_by"}

// A CSVWriter writes the per-second series as CSV, a row as each second
// becomes final, so that an interrupted run leaves what it measured.
type CSVWriter struct {
	w *csv.Writer
}

// NewCSVWriter writes the header row to w and returns a CSVWriter.
func NewCSVWriter(w io.Writer) (*CSVWriter, error) {
	c := &CSVWriter{w: csv.NewWriter(w)}
	c.w.Write(csvHeader)
	c.w.Flush()
	return c, c.w.Error()
}

// Write writes s as a row.
func (c *CSVWriter) Write(s Second) error {
	n := s.OK + s.TooMany + s.Unavailable + s.Other
	lat := func(d time.Duration) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatFloat(ms(d), 'f', 3, 64)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	c.w.Write([]string{strconv.Itoa(s.T), i(s.Sent), i(s.OK), i(s.TooMany), i(s.Unavailable), i(s.Other),
		lat(s.P50), lat(s.P99), i(s.Retries), i(s.Dropped), i(s.Errors), i(s.Canceled), s.OtherBy.String()})
	c.w.Flush()
	return c.w.Error()
}

// attemptHeader names the columns of an attempts file: the scheduled send
// time, in ms from the start of the run; the latency in ms; the status, or
// "err:" and the kind of error of an attempt without an answer; and 1 for
// a retry.
var attemptHeader = []string{"t_ms", "latency_ms", "status", "retry"}

// An AttemptWriter writes attempts as CSV rows, one per attempt, for what
// the per-second series sums away. Its Write is safe for concurrent use, as
// LoadConfig.OnAttempt needs. Rows are written in blocks of a few
// kilobytes, not one write per attempt; Flush writes what is left.
type AttemptWriter struct {
	mu  sync.Mutex
	w   *csv.Writer
	err error // the first write that failed
}

// NewAttemptWriter writes the header row to w and returns an
// AttemptWriter.
func NewAttemptWriter(w io.Writer) *AttemptWriter {
	a := &AttemptWriter{w: csv.NewWriter(w)}
	a.err = a.w.Write(attemptHeader)
	return a
}

// Write writes a as a row; after a failed write it does nothing, and
// Flush reports the failure.
func (a *AttemptWriter) Write(at Attempt) {
	status := at.Error
	if status == "" {
		status = strconv.Itoa(at.Status)
	}
	retry := "0"
	if at.Retry {
		retry = "1"
	}
	row := []string{strconv.FormatFloat(ms(at.At), 'f', 3, 64), strconv.FormatFloat(ms(at.Latency), 'f', 3, 64), status, retry}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = a.w.Write(row)
	}
}

// Flush writes the buffered rows and returns the first error of a write.
func (a *AttemptWriter) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.w.Flush()
	if a.err == nil {
		a.err = a.w.Error()
	}
	return a.err
}
