package memory_test

import (
	"context"
	"testing"
	"time"

	_ "time/tzdata"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// A request stamped a few ms before the end of New York's 23-hour day
// (2030-03-10) is decided after one stamped a few ms after it (two
// goroutines: the late one took its time.Now() first). The store decides
// at the later time, and places the window there too: the next day's,
// 24 hours long.
func TestZoneWindowOfALateStamp(t *testing.T) {
	t.Parallel()
	ny, _ := time.LoadLocation("America/New_York")
	s := memory.New(memory.Options{SweepEvery: -1})
	defer s.Close()
	r := &limit.Rule{Name: "day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 24 * time.Hour}, Location: ny}
	k := limit.StringKey("u")
	ctx := context.Background()
	decide := func(at time.Time) limit.Decision {
		res, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		d := res.Decisions[0]
		t.Logf("Now %v (store %v): allowed=%v remaining=%d reset=%v", at.In(ny).Format("Jan 2 15:04:05.000 MST"), res.Time.In(ny).Format("Jan 2 15:04:05.000 MST"), d.Allowed, d.Remaining, d.ResetAfter)
		return d
	}
	end := time.Date(2030, 3, 11, 0, 0, 0, 0, ny) // end of the 23 h day
	decide(end.Add(5 * time.Millisecond))
	decide(end.Add(10 * time.Millisecond))
	d := decide(end.Add(-10 * time.Millisecond)) // late stamp, decided at end+10ms
	if want := 24*time.Hour - 10*time.Millisecond; d.ResetAfter != want {
		t.Errorf("ResetAfter of the late-stamped request: %v, want %v (Mar 12 00:00 EDT)", d.ResetAfter, want)
	}
	// Late on Mar 11: the day's 3 are taken; nothing more may be admitted until Mar 12 00:00.
	late := time.Date(2030, 3, 11, 23, 30, 0, 0, ny)
	admitted := 0
	for range 3 {
		if decide(late).Allowed {
			admitted++
		}
	}
	if admitted > 0 {
		t.Errorf("Mar 11 23:30 EDT: %d more admitted in a local day that had used its 3", admitted)
	}
}
