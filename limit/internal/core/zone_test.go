package core

import (
	"testing"
	"time"

	_ "time/tzdata"

	"github.com/floodgate-gw/floodgate/limit"
)

// Over a year in zones with and without daylight saving time, the windows
// ZoneAt places tile time: each holds the times that ask for it, the next
// begins where it ended, day and hour windows begin on the local clock's
// midnight or hour (or at the change of offset that skipped it), and a
// rule's cached window gives the same answer as placing it afresh.
func TestZoneWindowsTile(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Shanghai", "UTC"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []time.Duration{30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 40 * 24 * time.Hour} {
			cached := zoneRule(t, w, loc)
			var prevStart, prevEnd int64
			from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			for at := from; at.Before(from.AddDate(1, 0, 0)); at = at.Add(7 * time.Minute) {
				now := at.UnixMicro()
				z := ZoneAt(cached, at)
				if fresh := ZoneAt(zoneRule(t, w, loc), at); fresh != z {
					t.Fatalf("%s %v at %v: cached %+v, placed afresh %+v", name, w, at, z, fresh)
				}
				start, end := z.Bounds(now)
				if start > now || end <= now {
					t.Fatalf("%s %v at %v: window [%v, %v) does not hold it", name, w, at, time.UnixMicro(start), time.UnixMicro(end))
				}
				switch {
				case prevEnd == 0:
				case start == prevStart:
					if end != prevEnd {
						t.Fatalf("%s %v at %v: the window that began at %v ends at %v, and before at %v", name, w, at, time.UnixMicro(start).In(loc), time.UnixMicro(end).In(loc), time.UnixMicro(prevEnd).In(loc))
					}
				case start != prevEnd:
					t.Fatalf("%s %v at %v: window begins at %v, the last ended at %v", name, w, at, time.UnixMicro(start).In(loc), time.UnixMicro(prevEnd).In(loc))
				default:
					local := time.UnixMicro(start).In(loc)
					_, off := local.Zone()
					_, before := local.Add(-time.Second).Zone()
					onClock := (local.Unix()+int64(off))%int64(w/time.Second) == 0
					if !onClock && off == before {
						t.Fatalf("%s %v at %v: window begins at %v, neither on the clock nor at a change of offset", name, w, at, local)
					}
					if l := time.Duration(end-start) * time.Microsecond; l <= 0 || l > w+time.Hour {
						t.Fatalf("%s %v at %v: a window of %v", name, w, at, l)
					}
				}
				prevStart, prevEnd = start, end
			}
		}
	}
}

// The days daylight saving time begins and ends in New York are 23 and 25
// hours long, local midnight to local midnight.
func TestZoneDaylightSavingDays(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	r := zoneRule(t, 24*time.Hour, ny)
	for _, tc := range []struct {
		at         time.Time
		start, end time.Time
	}{
		{time.Date(2030, 3, 10, 1, 30, 0, 0, ny), time.Date(2030, 3, 10, 0, 0, 0, 0, ny), time.Date(2030, 3, 11, 0, 0, 0, 0, ny)},
		{time.Date(2030, 3, 10, 20, 0, 0, 0, ny), time.Date(2030, 3, 10, 0, 0, 0, 0, ny), time.Date(2030, 3, 11, 0, 0, 0, 0, ny)},
		{time.Date(2030, 11, 3, 0, 30, 0, 0, ny), time.Date(2030, 11, 3, 0, 0, 0, 0, ny), time.Date(2030, 11, 4, 0, 0, 0, 0, ny)},
		{time.Date(2030, 11, 3, 23, 30, 0, 0, ny), time.Date(2030, 11, 3, 0, 0, 0, 0, ny), time.Date(2030, 11, 4, 0, 0, 0, 0, ny)},
		{time.Date(2030, 11, 4, 0, 0, 0, 0, ny), time.Date(2030, 11, 4, 0, 0, 0, 0, ny), time.Date(2030, 11, 5, 0, 0, 0, 0, ny)},
	} {
		start, end := ZoneAt(r, tc.at).Bounds(tc.at.UnixMicro())
		if start != tc.start.UnixMicro() || end != tc.end.UnixMicro() {
			t.Errorf("at %v: [%v, %v), want [%v, %v)", tc.at, time.UnixMicro(start).In(ny), time.UnixMicro(end).In(ny), tc.start, tc.end)
		}
	}
}

func zoneRule(t *testing.T, w time.Duration, loc *time.Location) *limit.Rule {
	t.Helper()
	r := &limit.Rule{Name: "z", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: w}, Location: loc}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}
