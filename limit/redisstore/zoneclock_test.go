package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// clockEnv decides with the gateway's clock and Redis's apart.
type clockEnv struct {
	t   *testing.T
	srv *testredis.Server
	s   *Store
	loc *time.Location
	// took is how long the last decideAt ran from setting the store's
	// clock: Redis's clock runs on meanwhile.
	took time.Duration
}

// decideAt decides l with the gateway's clock at gw and the store's (Redis) clock at rs.
func (e *clockEnv) decideAt(l limit.Limit, gw, rs time.Time, batched bool) limit.Decision {
	e.t.Helper()
	start := time.Now()
	defer func() { e.took = time.Since(start) }()
	at(e.t, e.s, rs)
	req := &limit.Request{Limits: []limit.Limit{l}, Now: gw}
	var res limit.Result
	if batched {
		res = batch(e.t, e.s, client(e.t, e.s), []*limit.Request{req})[0].res
	} else {
		var err error
		res, err = e.s.Decide(context.Background(), req)
		if err != nil {
			e.t.Fatal(err)
		}
	}
	d := res.Decisions[0]
	f := "Jan 2 15:04:05.000 MST"
	e.t.Logf("gateway %v redis %v batched=%v: allowed=%v remaining=%d reset=%v retry=%v", gw.In(e.loc).Format(f), res.Time.In(e.loc).Format(f), batched, d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter)
	return d
}

// keyEnd is when the key of l expires, on the store's clock (Redis TIME + offset).
func (e *clockEnv) keyEnd(l limit.Limit) time.Time {
	e.t.Helper()
	k := core.StoredKey(e.s.prefix, l.Rule, l.Key)
	v, err := e.srv.DoValue(e.t, "PTTL", k)
	if err != nil {
		e.t.Fatal(err)
	}
	now, err := e.s.Now(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return now.Add(time.Duration(v.(int64)) * time.Millisecond)
}

func newClockEnv(t *testing.T, name string) *clockEnv {
	srv := testredis.Start(t)
	return &clockEnv{t: t, srv: srv, s: open(t, srv), loc: zone(t, name)}
}

// The script runs a few ms after the gateway stamps req.Now. When that
// straddles the end of a day whose length differs from the next day's,
// the window the script opens must still have its own length: its key's
// PXAT and the reply's reset, and so the count of the whole local day.
func TestZoneWindowRedisAheadAcrossChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		zone string
		end  [3]int // y m d of the local midnight that ends the first window
		real time.Duration
	}{
		{"NY end of 23h day", "America/New_York", [3]int{2030, 3, 11}, 24 * time.Hour},
		{"NY start of 25h day", "America/New_York", [3]int{2030, 11, 3}, 25 * time.Hour},
		{"London start of 25h day", "Europe/London", [3]int{2030, 10, 27}, 25 * time.Hour},
		{"Lord Howe end of 23.5h day", "Australia/Lord_Howe", [3]int{2030, 10, 7}, 24 * time.Hour},
	} {
		for _, batched := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " single", true: " batched"}[batched], func(t *testing.T) {
				e := newClockEnv(t, tc.zone)
				r := valid(t, &limit.Rule{Name: "day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 24 * time.Hour}, Location: e.loc})
				l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
				b := time.Date(tc.end[0], time.Month(tc.end[1]), tc.end[2], 0, 0, 0, 0, e.loc)
				next := time.Date(tc.end[0], time.Month(tc.end[1]), tc.end[2]+1, 0, 0, 0, 0, e.loc)
				if next.Sub(b) != tc.real {
					t.Fatalf("day is %v", next.Sub(b))
				}
				// Gateway stamps 5 ms before midnight, Redis runs the script 5 ms after.
				d := e.decideAt(l, b.Add(-5*time.Millisecond), b.Add(5*time.Millisecond), batched)
				if want := tc.real - 5*time.Millisecond; d.ResetAfter < want-e.took-time.Millisecond || d.ResetAfter > want+time.Millisecond { // Redis's clock runs on after it is set
					t.Errorf("ResetAfter %v, want %v (the window ends %v)", d.ResetAfter, want, next)
				}
				ke := e.keyEnd(l) // later SETs keep this expiry (KEEPTTL)
				if ke.Before(next) {
					t.Errorf("the key expires at %v, %v before its window ends at %v", ke.In(e.loc), next.Sub(ke), next)
				}
				e.decideAt(l, b.Add(time.Hour), b.Add(time.Hour), batched)
				e.decideAt(l, b.Add(2*time.Hour), b.Add(2*time.Hour), batched)
				late := next.Add(-10 * time.Minute)
				if !ke.After(late) {
					t.Logf("by %v the key (expiry %v) is gone: deleting it as Redis would", late.In(e.loc), ke.In(e.loc))
					e.srv.Do(t, "DEL", core.StoredKey(e.s.prefix, l.Rule, l.Key))
				}
				if d := e.decideAt(l, late, late, batched); d.Allowed {
					t.Errorf("a 4th request admitted on the local day %v (limit 3/day)", b.Format("2006-01-02"))
				}
				e.srv.CheckExpiry(t)
			})
		}
	}
}

// Redis's clock a few ms behind the gateway's at a midnight where the
// window length changes: the script must place the previous day's window,
// which has used its count, and not open a fresh one.
func TestZoneWindowRedisBehindAcrossChange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zone  string
		start [3]int // local midnight where the window length changes
	}{
		{"NY start of 23h day", "America/New_York", [3]int{2030, 3, 10}},
		{"NY end of 23h day", "America/New_York", [3]int{2030, 3, 11}},
		{"NY start of 25h day", "America/New_York", [3]int{2030, 11, 3}},
		{"NY end of 25h day", "America/New_York", [3]int{2030, 11, 4}},
		{"Santiago change at midnight", "America/Santiago", [3]int{2030, 9, 8}},
	} {
		for _, batched := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " single", true: " batched"}[batched], func(t *testing.T) {
				e := newClockEnv(t, tc.zone)
				r := valid(t, &limit.Rule{Name: "day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 24 * time.Hour}, Location: e.loc})
				l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
				b := firstOfDay(e.loc, tc.start)
				t.Logf("boundary %v", b.In(e.loc))
				for range 3 {
					e.decideAt(l, b.Add(-time.Hour), b.Add(-time.Hour), batched)
				}
				// Gateway 5 ms past midnight, Redis behind it: still the
				// previous local day. Redis is set 300 ms before midnight,
				// not a few ms: its clock runs on between the setting and
				// the script, by more than a few ms on a busy machine, and
				// past midnight it would rightly open the new day.
				admitted := 0
				for range 3 {
					if e.decideAt(l, b.Add(5*time.Millisecond), b.Add(-300*time.Millisecond), batched).Allowed {
						admitted++
					}
				}
				if admitted > 0 {
					t.Errorf("%d more admitted in the local day before %v, which had used its 3", admitted, b.In(e.loc))
				}
				e.srv.CheckExpiry(t)
			})
		}
	}
}

// firstOfDay is the first instant of a local date: in Santiago 00:00 may
// not exist, and time.Date may give 23:00 the day before.
func firstOfDay(loc *time.Location, ymd [3]int) time.Time {
	t := time.Date(ymd[0], time.Month(ymd[1]), ymd[2], 0, 0, 0, 0, loc)
	for t.In(loc).Day() != ymd[2] {
		t = t.Add(time.Minute)
	}
	for t.Add(-time.Minute).In(loc).Day() == ymd[2] {
		t = t.Add(-time.Minute)
	}
	return t
}
