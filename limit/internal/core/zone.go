package core

import (
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
)

// Zone places a rule's fixed windows aligned to the clock (AlignEpoch)
// around one time: they are Window µs long and begin where the time plus
// Off is a multiple of Window. Stores get it from ZoneAt and pass it to
// Check, Commit and Peek; the Redis store sends both numbers to its
// script, which places the window on Redis's clock the same way.
type Zone struct {
	Window int64 // µs
	Off    int64 // µs
}

// ZoneAt returns where r's fixed windows lie around t. In UTC (a nil
// Location) they are multiples of the window since the epoch. With a
// Location they begin where the local clock reads such a multiple: local
// midnight for day windows, the local hour for hour windows. Off is then
// the zone's UTC offset at t, except for a window across a change of the
// offset (daylight saving time): local midnight to local midnight is 23
// or 25 hours on those days, and that window is described as one of its
// real length, so that it neither restarts nor ends early when the offset
// changes. The window after it begins at its end. Call Validate on r
// first.
func ZoneAt(r *limit.Rule, t time.Time) Zone {
	p := params(r)
	if !zoned(r, p) {
		return Zone{Window: p.Window}
	}
	z, _, _ := ZoneNear(r, t)
	return z
}

// zoned reports whether r's windows are placed by a Location.
func zoned(r *limit.Rule, p *ruledata.Params) bool {
	return !p.FixedZone && r.Location != nil && r.Algorithm == limit.FixedWindow && r.Align == limit.AlignEpoch
}

// ZoneNear is ZoneAt, with the bounds of the window that holds t and of
// the windows before and after it (the previous one's start, its start,
// its end, the next one's end), and whether all three have the same Zone.
// A store whose clock is not t's (Redis's) may be in a neighbouring window:
// when they are not alike (next to a change of offset), the Zone of t does
// not place them, and the store places its time among the bounds.
func ZoneNear(r *limit.Rule, t time.Time) (z Zone, near [4]int64, alike bool) {
	p := params(r)
	w := p.Window
	if !zoned(r, p) {
		if w > 0 {
			z = Zone{Window: w}
			start, end := z.Bounds(t.UnixMicro())
			near = [4]int64{start - w, start, end, end + w}
		}
		return z, near, true
	}
	now := t.UnixMicro()
	last := ruledata.SpanOf(r)
	sp := last.Load()
	if sp == nil || now < sp.Start || now >= sp.End {
		cur := place(r.Location, w, now)
		prev, next := place(r.Location, w, cur.Start-1), place(r.Location, w, cur.End)
		cur.Near = [4]int64{prev.Start, cur.Start, cur.End, next.End}
		cur.Alike = prev.Window == cur.Window && prev.Off == cur.Off && next.Window == cur.Window && next.Off == cur.Off
		sp = &cur
		last.Store(sp)
	}
	return Zone{Window: sp.Window, Off: sp.Off}, sp.Near, sp.Alike
}

// maxZoneWindow bounds the windows ZoneAt places across a change of
// offset as below; a longer one may hold more than one change, and is
// placed by the local clock at its two ends alone.
const maxZoneWindow = int64(31 * 24 * time.Hour / time.Microsecond)

// place works out the window of w µs of loc that holds now: where the
// local clock read a multiple of the window, and where it reads the next,
// across a change of offset (at most one each side) if the window holds
// one.
func place(loc *time.Location, w, now int64) ruledata.Span {
	t := time.UnixMicro(now).In(loc)
	_, o := t.Zone()
	off := int64(o) * 1e6
	ws := floorDiv(now+off, w) * w // the window's start on the local clock
	plain := ruledata.Span{Start: ws - off, End: ws + w - off, Window: w, Off: off}
	if w > maxZoneWindow {
		// Where the local clock reads ws and ws + w, each with the offset
		// of then, whatever changes lie between.
		start := ws - offsetAt(loc, ws-off)
		end := ws + w - offsetAt(loc, ws+w-off)
		if start > now || end <= now || start == plain.Start && end == plain.End {
			return plain
		}
		return ruledata.Span{Start: start, End: end, Window: end - start, Off: floorMod(-start, end-start)}
	}
	start, end := plain.Start, plain.End
	zs, ze := t.ZoneBounds() // where the offset of now holds
	// At a change of offset b the local clock jumps from b+prev to b+next.
	// A window that holds both readings goes on across the change; one
	// that holds only one of them ends or begins at it (the clock went
	// forward past the rest, or went back and reads some of its times
	// again, later, as a window of their own).
	if b := zs.UnixMicro(); !zs.IsZero() && start <= b {
		start = b
		if prev := offsetAt(loc, b-1); ws < b+prev && b+prev <= ws+w {
			start = ws - prev
		}
	}
	if b := ze.UnixMicro(); !ze.IsZero() && end >= b {
		end = b
		if next := offsetAt(loc, b); ws <= b+next && b+next < ws+w {
			end = ws + w - next
		}
	}
	if start == plain.Start && end == plain.End {
		return plain
	}
	l := end - start
	return ruledata.Span{Start: start, End: end, Window: l, Off: floorMod(-start, l)}
}

// offsetAt is loc's UTC offset at us µs since the epoch, in µs.
func offsetAt(loc *time.Location, us int64) int64 {
	_, off := time.UnixMicro(us).In(loc).Zone()
	return int64(off) * 1e6
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
