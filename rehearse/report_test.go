package rehearse

import (
	"bytes"
	"encoding/csv"
	"regexp"
	"strings"
	"testing"
	"time"
)

func testResult() *Result {
	other := Breakdown{"504": 25, "502": 5, "err:timeout": 15, "err:reset": 5}
	rows := []Second{
		{T: 0, Sent: 200, OK: 200, P50: 1200 * time.Microsecond, P99: 3 * time.Millisecond},
		{T: 1, Sent: 5000, OK: 800, TooMany: 4000, Unavailable: 150, Other: 50, Errors: 20, Dropped: 3, Retries: 7,
			P50: 2 * time.Millisecond, P99: 3100 * time.Millisecond, OtherBy: other},
		{T: 2},
	}
	r := &Result{
		Profile: Profile{Shape: Surge, From: 200, Rate: 5000, StepAt: time.Second, Duration: 3 * time.Second},
		Seconds: rows, Scheduled: 5196, Succeeded: 1000, Elapsed: 3 * time.Second, Span: 3 * time.Second,
		P90: 10 * time.Millisecond, P999: 3200 * time.Millisecond, Max: 3300 * time.Millisecond,
		Errors: map[string]int64{"timeout": 15, "connection reset": 5},
	}
	for i := range rows {
		r.Total.add(&rows[i])
	}
	r.Total.P50, r.Total.P99 = 2*time.Millisecond, 3100*time.Millisecond
	return r
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	WriteHeader(&b)
	for _, s := range testResult().Seconds {
		WriteSecond(&b, s)
	}
	want := "" +
		"   t    sent     2xx     429     503   other       p50       p99  other was\n" +
		"   0     200     200       0       0       0       1.2       3.0\n" +
		"   1    5000     800    4000     150      50       2.0    3100.0  504:25 err:timeout:15 502:5 err:reset:5\n" +
		"   2       0       0       0       0       0         -         -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteSummary(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteSummary(&b, testResult()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"summary (complete, 3.0s)",
		"5196 scheduled, 5200 sent (7 retries), 3 dropped at the concurrency cap",
		"2xx 1000   429 4000   503 150   other 50 (20 without an answer)\n  other      504:25 err:timeout:15 502:5 err:reset:5\n",
		"1000 of 5196 requests answered 2xx in the end",
		"p50 2.0   p90 10.0   p99 3100.0   p99.9 3200.0   max 3300.0",
		"offered 1732.0/s   achieved 1733.3/s   2xx 333.3/s",
		"errors     15 × timeout\n             5 × connection reset\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary does not contain %q:\n%s", want, out)
		}
	}
}

func TestCSVWriter(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	c, err := NewCSVWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range testResult().Seconds {
		if err := c.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	records, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"t", "sent", "2xx", "429", "503", "other", "p50_ms", "p99_ms", "retries", "dropped", "errors", "canceled", "other_by"},
		{"0", "200", "200", "0", "0", "0", "1.200", "3.000", "0", "0", "0", "0", ""},
		{"1", "5000", "800", "4000", "150", "50", "2.000", "3100.000", "7", "3", "20", "0", "504:25 err:timeout:15 502:5 err:reset:5"},
		{"2", "0", "0", "0", "0", "0", "", "", "0", "0", "0", "0", ""},
	}
	if len(records) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(records), len(want), records)
	}
	for i := range want {
		if strings.Join(records[i], ",") != strings.Join(want[i], ",") {
			t.Errorf("record %d: %v, want %v", i, records[i], want[i])
		}
	}
}

func TestAttemptWriter(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	a := NewAttemptWriter(&b)
	a.Write(Attempt{At: 1500 * time.Microsecond, Latency: 200 * time.Millisecond, Status: 200})
	a.Write(Attempt{At: 2 * time.Second, Latency: 3001250 * time.Microsecond, Status: 503, Retry: true})
	a.Write(Attempt{At: 2100 * time.Millisecond, Latency: 10 * time.Second, Error: "err:timeout"})
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "t_ms,latency_ms,status,retry\n" +
		"1.500,200.000,200,0\n" +
		"2000.000,3001.250,503,1\n" +
		"2100.000,10000.000,err:timeout,0\n"
	if b.String() != want {
		t.Errorf("attempts:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteHTML(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteHTML(&b, testResult(), "flash sale <rehearsal>"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<!DOCTYPE html>", "<title>flash sale &lt;rehearsal&gt;</title>", "<svg", "requests per second",
		"latency (ms, log scale)", `stroke="#d62728"`, "<script>", `"TooMany":4000`, "summary (complete",
		// Which statuses other was: in the legend, the summary, the
		// table and the data under the pointer.
		"other (504, err:timeout, 502, err:reset)</span>",
		"other      504:25 err:timeout:15 502:5 err:reset:5",
		`<td class="by">504:25 err:timeout:15 502:5 err:reset:5</td>`,
		`"OtherBy":"504:25 err:timeout:15 502:5 err:reset:5"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not contain %q", want)
		}
	}
	// Self-contained: nothing fetched from anywhere.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(`).FindString(page); m != "" {
		t.Errorf("the page loads an external asset: %q", m)
	}
	// An empty run still makes a page.
	b.Reset()
	if err := WriteHTML(&b, &Result{Profile: Profile{Shape: Const, Rate: 1, Duration: time.Second}}, "empty"); err != nil || !strings.Contains(b.String(), "<svg") {
		t.Errorf("empty run: %v\n%s", err, b.String())
	}
}
