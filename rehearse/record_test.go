package rehearse

import (
	"reflect"
	"testing"
	"time"
)

const ms1 = time.Millisecond

func TestRecorderSeconds(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.send(100*ms1, 100*ms1, false)
	r.send(500*ms1, 501*ms1, false)
	r.drop(900*ms1, false)
	r.advance(1200 * ms1)
	if rows := r.ready(900 * ms1); len(rows) != 0 {
		t.Fatalf("second 0 final before its end: %+v", rows)
	}
	if rows := r.ready(1100 * ms1); len(rows) != 0 {
		t.Fatalf("second 0 final with two attempts in flight: %+v", rows)
	}
	r.finish(100*ms1, outcomeOK, 10*ms1, "", "", -1)
	// A 429 whose retry is due in second 1: the retry holds second 1 open
	// from now on.
	r.finish(500*ms1, outcomeTooMany, 20*ms1, "", "", 1050*ms1)
	rows := r.ready(1100 * ms1)
	want0 := Second{T: 0, Sent: 2, OK: 1, TooMany: 1, Dropped: 1, P50: 10 * ms1, P99: 20 * ms1}
	if len(rows) != 1 || !reflect.DeepEqual(rows[0], want0) {
		t.Fatalf("ready = %+v, want [%+v]", rows, want0)
	}

	r.advance(3 * time.Second)
	if rows := r.ready(2100 * ms1); len(rows) != 0 {
		t.Fatalf("second 1 final while a retry waits: %+v", rows)
	}
	r.send(1050*ms1, 1052*ms1, true)
	r.finish(1050*ms1, outcomeError, 2*ms1, "err:refused", "connection refused", -1)
	rows = r.ready(2100 * ms1)
	want1 := Second{T: 1, Sent: 1, Retries: 1, Other: 1, Errors: 1, OtherBy: Breakdown{"err:refused": 1}, P50: 2 * ms1, P99: 2 * ms1}
	if len(rows) != 1 || !reflect.DeepEqual(rows[0], want1) {
		t.Fatalf("ready = %+v, want [%+v]", rows, want1)
	}

	// The pacing loop has not passed second 3 yet: it waits, even if the
	// clock has.
	r.advance(3500 * ms1)
	if rows := r.ready(5 * time.Second); len(rows) != 1 || rows[0].T != 2 {
		t.Fatalf("ready = %+v, want only second 2", rows)
	}

	// A retry scheduled into a second already final is filed in the first
	// open one.
	r.send(3100*ms1, 3100*ms1, false)
	r.finish(3100*ms1, outcomeUnavailable, 5*ms1, "", "", 2900*ms1)
	r.send(2900*ms1, 3200*ms1, true)
	r.finish(2900*ms1, outcomeOK, 300*ms1, "", "", -1)
	rows = r.flush(6)
	if len(rows) != 3 || rows[0].T != 3 || rows[0].Sent != 2 || rows[0].Retries != 1 || rows[0].OK != 1 || rows[0].Unavailable != 1 {
		t.Fatalf("flush = %+v, want seconds 3 (with the late retry), 4 and 5", rows)
	}
	if !reflect.DeepEqual(rows[1], Second{T: 4}) || !reflect.DeepEqual(rows[2], Second{T: 5}) {
		t.Errorf("empty seconds: %+v", rows[1:])
	}
	if r.succeeded != 2 || r.errs["connection refused"] != 1 || r.total.Count() != 5 {
		t.Errorf("succeeded %d, errors %v, total latencies %d", r.succeeded, r.errs, r.total.Count())
	}
	if r.lastSend != 3200*ms1 {
		t.Errorf("last send %v, want 3.2s", r.lastSend)
	}
}

func TestRecorderErrorKindsBounded(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	for i := range 50 {
		r.send(0, 0, false)
		r.finish(0, outcomeError, 0, "err:other", string(rune('A'+i)), -1)
	}
	if len(r.errs) != maxErrorKinds+1 || r.errs["other errors"] != 50-maxErrorKinds {
		t.Errorf("%d kinds, %d other errors", len(r.errs), r.errs["other errors"])
	}
}

// Other is broken down by what each attempt was: a status, or an error's
// kind; the counts add up to Other, per second and in the total.
func TestRecorderOtherBreakdown(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	finish := func(at time.Duration, o outcome, kind, msg string) {
		r.send(at, at, false)
		r.finish(at, o, ms1, kind, msg, -1)
	}
	for range 10 {
		finish(100*ms1, outcomeOther, "504", "")
	}
	finish(200*ms1, outcomeOther, "502", "")
	finish(300*ms1, outcomeOther, "502", "")
	finish(400*ms1, outcomeError, "err:timeout", "timeout")
	finish(500*ms1, outcomeOK, "", "")
	finish(600*ms1, outcomeTooMany, "", "")
	finish(1100*ms1, outcomeError, "err:refused", "connection refused")
	finish(1200*ms1, outcomeCanceled, "", "")
	r.advance(2 * time.Second)
	rows := r.ready(2 * time.Second)
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	if want := (Breakdown{"504": 10, "502": 2, "err:timeout": 1}); rows[0].Other != 13 || rows[0].Errors != 1 || !reflect.DeepEqual(rows[0].OtherBy, want) {
		t.Errorf("second 0: other %d, errors %d, by %v; want 13, 1, %v", rows[0].Other, rows[0].Errors, rows[0].OtherBy, want)
	}
	if got := rows[0].OtherBy.String(); got != "504:10 502:2 err:timeout:1" {
		t.Errorf("second 0 breakdown %q", got)
	}
	if want := (Breakdown{"err:refused": 1}); !reflect.DeepEqual(rows[1].OtherBy, want) || rows[1].Canceled != 1 {
		t.Errorf("second 1: by %v, canceled %d; want %v, 1", rows[1].OtherBy, rows[1].Canceled, want)
	}
	var total Second
	for i := range rows {
		total.add(&rows[i])
	}
	if want := (Breakdown{"504": 10, "502": 2, "err:timeout": 1, "err:refused": 1}); total.Other != 14 || !reflect.DeepEqual(total.OtherBy, want) {
		t.Errorf("total: other %d, by %v; want 14, %v", total.Other, total.OtherBy, want)
	}
	// Adding must not write into a row's own breakdown.
	if rows[1].OtherBy["504"] != 0 || len(rows[1].OtherBy) != 1 {
		t.Errorf("add changed a row: %v", rows[1].OtherBy)
	}
}

func TestBreakdownString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		b    Breakdown
		want string
	}{
		{nil, ""},
		{Breakdown{"504": 1}, "504:1"},
		// Most first; ties by name.
		{Breakdown{"err:timeout": 3, "502": 3, "504": 7}, "504:7 502:3 err:timeout:3"},
	} {
		if got := tt.b.String(); got != tt.want {
			t.Errorf("%v: %q, want %q", map[string]int64(tt.b), got, tt.want)
		}
	}
}
