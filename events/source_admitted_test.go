package events

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"
)

// recordAdmitted records 36 events of two routes and every type a request
// gives, through r, and returns the ids of route lucky-meal's events a
// replay takes, in the order recorded: without admissions, and with them.
// users maps each id to its event's user.
func recordAdmitted(t *testing.T, r *testRecorder) (replay, all []string, users map[string]string) {
	t.Helper()
	users = map[string]string{}
	for i := range 36 {
		e := testEvent(i)
		switch i % 6 {
		case 0:
			e.Type = TypeBreakerRejected
		case 1, 4:
			e.Type = TypeAdmitted
		case 2:
			e.Type, e.Route = TypeAdmitted, "other"
		case 3:
			e.Type = TypeOverloaded
		case 5:
			e.Type, e.Limit = TypeRateLimited, "user"
			if i%4 == 1 {
				e.Type, e.Limit, e.Route = TypeBreakerRejected, "", "other"
			}
		}
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		users[e.ID] = e.Keys["user"][0]
		if e.Route != "lucky-meal" {
			continue
		}
		switch e.Type {
		case TypeAdmitted:
			all = append(all, e.ID)
		case TypeBreakerRejected, TypeOverloaded:
			all = append(all, e.ID)
			replay = append(replay, e.ID)
		}
	}
	return replay, all, users
}

// checkAdmitted replays lucky-meal from c, where recordAdmitted recorded:
// a source opened without Options.Admitted gives no admission, one opened
// with it gives the route's among the others, and no other route's; a
// replay stopped after an admission and an event done resumes after both;
// and once all are done, none is pending, with or without admissions.
// same compares two lists of ids in the order the sink keeps.
func checkAdmitted(t *testing.T, c Sink, o Options, replay, all []string, same func(got, want []string) bool) {
	t.Helper()
	ctx := context.Background()
	open := func(admitted bool) Source {
		t.Helper()
		o := o
		o.Admitted = admitted
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
	types := map[string]string{}
	drain := func(src Source, stop func(taken []*Event) bool) []string {
		t.Helper()
		var taken []*Event
		var ids []string
		for !stop(taken) {
			e, err := src.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if e.Route != "lucky-meal" {
				t.Fatalf("Next gave event %s of route %s", e.ID, e.Route)
			}
			types[e.ID] = e.Type
			taken = append(taken, e)
			ids = append(ids, e.ID)
			if err := src.Done(ctx, e); err != nil {
				t.Fatalf("Done: %v", err)
			}
		}
		return ids
	}

	src := open(false)
	if got := pending(src); !same(got, replay) {
		t.Fatalf("Pending without admissions = %v, want %v", got, replay)
	}
	src.Close()
	src = open(true)
	if got := pending(src); !same(got, all) {
		t.Fatalf("Pending with admissions = %v, want %v", got, all)
	}
	// Stopped once an admission was done and an event to replay after it.
	first := drain(src, func(taken []*Event) bool {
		admitted := false
		for _, e := range taken {
			admitted = admitted || e.Type == TypeAdmitted
		}
		return admitted && len(taken) > 0 && taken[len(taken)-1].Type != TypeAdmitted
	})
	src.Close()
	left := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return slices.Contains(first, id) })
	src = open(true)
	if got := pending(src); !same(got, left) {
		t.Fatalf("after %v done, Pending = %v, want %v", first, got, left)
	}
	rest := drain(src, func([]*Event) bool { return false })
	if got := append(slices.Clone(first), rest...); !same(got, all) {
		t.Fatalf("Next with admissions gave %v, want %v", got, all)
	}
	for _, id := range all {
		if admitted := types[id] == TypeAdmitted; admitted == slices.Contains(replay, id) {
			t.Errorf("event %s came back of type %s", id, types[id])
		}
	}
	src.Close()

	for _, admitted := range []bool{true, false} {
		src = open(admitted)
		if got := pending(src); len(got) != 0 {
			t.Errorf("Pending (admitted %v) once all are done = %v", admitted, got)
		}
		if e, err := src.Next(ctx); !errors.Is(err, io.EOF) {
			t.Errorf("Next (admitted %v) once all are done = %v, %v, want io.EOF", admitted, e, err)
		}
		src.Close()
	}
}

// TestSourceAdmitted: with Options.Admitted a source hands back the
// route's admitted events too, in the order recorded, and marks them done.
func TestSourceAdmitted(t *testing.T) {
	t.Parallel()
	for _, sc := range sinkCases {
		if sc.name == "file+spool" {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c, o, read := sc.setup(t)
			o.directTimeout = deliverTimeout // as in TestSource
			r := newTestRecorder(t, c, o)
			replay, all, _ := recordAdmitted(t, r)
			waitFor(t, "delivery", func() bool { return len(read()) >= 36 })
			if n := len(read()); n != 36 {
				t.Fatalf("%d events in the sink, want the 36 recorded", n)
			}
			r.Close()
			checkAdmitted(t, c, o, replay, all, equal)
		})
	}
}

// TestKafkaSourceAdmitted is TestSourceAdmitted on a topic, where the
// order kept is that of each partition, which holds every event of one
// limiting key: admissions and events to replay of one user come in the
// order recorded.
func TestKafkaSourceAdmitted(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	addrs := k.ListenAddrs()
	c := kafkaCase(t, addrs)
	r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
	replay, all, users := recordAdmitted(t, r)
	waitFor(t, "delivery", func() bool { return len(kafkaRecords(t, addrs)) >= 36 })
	r.Close()
	perUser := func(got, want []string) bool {
		if !sameSet(got, want) {
			return false
		}
		for _, u := range users {
			of := func(ids []string) []string {
				return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return users[id] != u })
			}
			if !equal(of(got), of(want)) {
				return false
			}
		}
		return true
	}
	checkAdmitted(t, c, Options{}, replay, all, perUser)
}

// checkDoneAfterEnd replays lucky-meal from c, which holds an event to
// replay and then an admission, as events replay --parallel does: both
// taken, Next at the end, then both done. The admission done last is
// done all the same: a source opened again has nothing pending.
func checkDoneAfterEnd(t *testing.T, c Sink, o Options) {
	t.Helper()
	ctx := context.Background()
	o.Admitted = true
	src, err := OpenSource(ctx, c, "lucky-meal", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var taken []*Event
	for {
		e, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		taken = append(taken, e)
	}
	if len(taken) != 2 || taken[1].Type != TypeAdmitted {
		t.Fatalf("Next gave %d events, want the event and then the admission", len(taken))
	}
	for _, e := range taken {
		if err := src.Done(ctx, e); err != nil {
			t.Fatalf("Done: %v", err)
		}
	}
	src.Close()
	src, err = OpenSource(ctx, c, "lucky-meal", o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Pending(ctx, func(e *Event) bool { t.Errorf("event %s of type %s still pending", e.ID, e.Type); return true }); err != nil {
		t.Fatal(err)
	}
}

// recordEventThenAdmission records, through r, an event to replay of the
// route, then an admission of the same user, then another route's event.
func recordEventThenAdmission(t *testing.T, r *testRecorder) {
	t.Helper()
	for i, typ := range []string{TypeBreakerRejected, TypeAdmitted, TypeBreakerRejected} {
		e := testEvent(0)
		e.Type, e.Time = typ, e.Time.Add(time.Duration(i)*time.Millisecond)
		if i == 2 {
			e.Route = "other"
		}
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
	}
}

// TestSourceAdmittedDoneAfterEnd: an admission done after Next found the
// end is not left for the next replay.
func TestSourceAdmittedDoneAfterEnd(t *testing.T) {
	t.Parallel()
	for _, sc := range sinkCases {
		if sc.name == "file+spool" {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c, o, read := sc.setup(t)
			o.directTimeout = deliverTimeout
			r := newTestRecorder(t, c, o)
			recordEventThenAdmission(t, r)
			waitFor(t, "delivery", func() bool { return len(read()) >= 3 })
			r.Close()
			checkDoneAfterEnd(t, c, o)
		})
	}
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		addrs := startKafka(t).ListenAddrs()
		c := kafkaCase(t, addrs)
		r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
		recordEventThenAdmission(t, r)
		waitFor(t, "delivery", func() bool { return len(kafkaRecords(t, addrs)) >= 3 })
		r.Close()
		checkDoneAfterEnd(t, c, Options{})
	})
}
