package events

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestSource records a mix of routes and types to each sink and replays
// one route: only its breaker_rejected events come back, in order; Done
// survives reopening, also with several events taken at once; an event
// taken but not done comes back first; and Pending counts without
// consuming.
func TestSource(t *testing.T) {
	t.Parallel()
	for _, sc := range sinkCases {
		if sc.name == "file+spool" {
			continue // the same file as "file" once delivered
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c, o, read := sc.setup(t)
			// As in TestRecordDelivered: a sink slower than 40 ms on a
			// loaded machine sends part of a batch through the spool
			// again, with the same ids; this test is about replay.
			o.directTimeout = deliverTimeout
			r := newTestRecorder(t, c, o)
			var want []string // the ids of route A's events to replay, in order
			for i := range 30 {
				e := testEvent(i)
				e.Type = TypeBreakerRejected
				switch i % 3 {
				case 0:
					// An operator's action on the route is no request to
					// replay.
					if i%4 == 0 {
						e.Type, e.Action, e.By = TypeAdminAction, ActionForceBreaker, "admin"
					}
				case 1:
					e.Route = "other"
				case 2:
					switch i % 4 {
					case 0:
						e.Type = TypeAdmitted
					case 1:
						// Turned away by the route's protection: replayed too.
						e.Type = TypeOverloaded
					}
				}
				if !r.Record(context.Background(), e) {
					t.Fatalf("Record(%d) = false", i)
				}
				if e.Route == "lucky-meal" && (e.Type == TypeBreakerRejected || e.Type == TypeOverloaded) {
					want = append(want, e.ID)
				}
			}
			waitFor(t, "delivery", func() bool { return len(read()) >= 30 })
			if n := len(read()); n != 30 {
				t.Fatalf("%d events in the sink, want the 30 recorded", n)
			}
			r.Close()

			ctx := context.Background()
			open := func() Source {
				t.Helper()
				src, err := OpenSource(ctx, c, "lucky-meal", o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { src.Close() })
				return src
			}
			pending := func(src Source) []string {
				t.Helper()
				var ids []string
				if err := src.Pending(ctx, func(e *Event) bool { ids = append(ids, e.ID); return true }); err != nil {
					t.Fatalf("Pending: %v", err)
				}
				return ids
			}
			next := func(src Source) *Event {
				t.Helper()
				e, err := src.Next(ctx)
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				return e
			}

			src := open()
			if got := pending(src); !equal(got, want) {
				t.Fatalf("Pending before any replay = %v, want %v", got, want)
			}
			for i := range 4 {
				e := next(src)
				if e.ID != want[i] {
					t.Fatalf("event %d = %s, want %s", i, e.ID, want[i])
				}
				if err := src.Done(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			// Three taken before any is done, as events replay --parallel
			// takes them; the first two done in order, the third never:
			// a crash in the middle of it.
			var taken []*Event
			for i := 4; i < 7; i++ {
				if e := next(src); e.ID != want[i] {
					t.Fatalf("event %d = %s, want %s", i, e.ID, want[i])
				} else {
					taken = append(taken, e)
				}
			}
			for _, e := range taken[:2] {
				if err := src.Done(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			src.Close()

			src = open()
			if got := pending(src); !equal(got, want[6:]) {
				t.Fatalf("Pending after 6 done = %v, want %v", got, want[6:])
			}
			for i := 6; i < len(want); i++ {
				e := next(src)
				if e.ID != want[i] {
					t.Fatalf("after reopening, event %d = %s, want %s", i, e.ID, want[i])
				}
				if err := src.Done(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("Next at the end = %v, want io.EOF", err)
			}
			src.Close()

			src = open()
			if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("Next once all are done = %v, want io.EOF", err)
			}
			if got := pending(src); len(got) != 0 {
				t.Fatalf("Pending once all are done = %v", got)
			}
		})
	}
}

// TestSourceEmpty: replaying before anything was recorded finds nothing,
// and is not an error.
func TestSourceEmpty(t *testing.T) {
	t.Parallel()
	for _, sc := range sinkCases {
		if sc.name == "file+spool" {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c, o, _ := sc.setup(t)
			src, err := OpenSource(context.Background(), c, "lucky-meal", o)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if _, err := src.Next(context.Background()); !errors.Is(err, io.EOF) {
				t.Fatalf("Next = %v, want io.EOF", err)
			}
			if err := src.Pending(context.Background(), func(*Event) bool { t.Error("an event"); return true }); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := OpenSource(context.Background(), baseSink(SinkNone), "x", Options{}); err == nil {
		t.Error("OpenSource with sink none succeeded")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
