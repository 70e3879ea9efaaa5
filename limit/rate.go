package limit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is Count events per Period: 800/s, 1/10s, 100/min.
type Rate struct {
	Count  int64
	Period time.Duration
}

// MaxCount bounds the count of a rate. It keeps every product of a count
// and a microsecond time inside the 2^53 integers that a float64 (and so a
// Lua number in a Redis script) holds exactly.
const MaxCount = 1_000_000_000

// MinPeriod is the shortest window or period a rate may have.
const MinPeriod = time.Millisecond

// ParseRate reads a rate in one of the forms
//
//	N/UNIT       800/s, 100/min, 2/h, 1000/d (UNIT: ms, s, m, min, h, d)
//	N/DURATION   1/10s, 5/250ms, 100/1m30s, 3/2d
//	N:SECONDS    100:60, a count and a window in seconds
//
// The count must be positive and the period at least MinPeriod.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	var count, per string
	var seconds bool
	if i := strings.IndexByte(t, '/'); i >= 0 {
		count, per = t[:i], t[i+1:]
	} else if i := strings.IndexByte(t, ':'); i >= 0 {
		count, per, seconds = t[:i], t[i+1:], true
	} else {
		return Rate{}, fmt.Errorf("rate %q: want N/UNIT (800/s), N/DURATION (1/10s) or COUNT:SECONDS (100:60)", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: count %q is not a whole number", s, count)
	}
	per = strings.TrimSpace(per)
	var d time.Duration
	if seconds {
		sec, err := strconv.ParseInt(per, 10, 64)
		if err != nil || sec <= 0 || sec > int64(maxPeriod/time.Second) {
			return Rate{}, fmt.Errorf("rate %q: window %q is not a positive number of seconds", s, per)
		}
		d = time.Duration(sec) * time.Second
	} else if d, err = parsePeriod(per); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %v", s, err)
	}
	r := Rate{Count: n, Period: d}
	if err := r.validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %v", s, err)
	}
	return r, nil
}

// maxPeriod keeps windows representable in microseconds with room to spare.
const maxPeriod = 366 * 24 * time.Hour

var units = map[string]time.Duration{
	"us": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond, "s": time.Second,
	"m": time.Minute, "min": time.Minute,
	"h": time.Hour, "d": 24 * time.Hour,
	// And in words, as people write them: 100/minute, 5/2hours.
	"sec": time.Second, "second": time.Second, "seconds": time.Second,
	"mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"hour": time.Hour, "hours": time.Hour,
	"day": 24 * time.Hour, "days": 24 * time.Hour,
}

// parsePeriod reads "s", "min", "10s", "250ms", "2d" or any Go duration.
func parsePeriod(p string) (time.Duration, error) {
	if u, ok := units[p]; ok {
		return u, nil
	}
	i := 0
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	if i > 0 && i < len(p) {
		if u, ok := units[p[i:]]; ok {
			n, err := strconv.ParseInt(p[:i], 10, 64)
			if err != nil || n > int64(maxPeriod/u) {
				return 0, fmt.Errorf("period %q is out of range", p)
			}
			return time.Duration(n) * u, nil
		}
	}
	d, err := time.ParseDuration(p)
	if err != nil {
		return 0, fmt.Errorf("unknown unit or duration %q (units: ms, s or second, m, min or minute, h or hour, d or day)", p)
	}
	return d, nil
}

func (r Rate) validate() error {
	switch {
	case r.Count <= 0:
		return fmt.Errorf("count %d must be positive", r.Count)
	case r.Count > MaxCount:
		return fmt.Errorf("count %d is above the maximum %d", r.Count, MaxCount)
	case r.Period < MinPeriod:
		return fmt.Errorf("period %v is shorter than %v", r.Period, MinPeriod)
	case r.Period > maxPeriod:
		return fmt.Errorf("period %v is longer than %v", r.Period, maxPeriod)
	}
	return nil
}

// String formats the rate so that ParseRate reads it back.
func (r Rate) String() string {
	switch r.Period {
	case time.Second:
		return fmt.Sprintf("%d/s", r.Count)
	case time.Minute:
		return fmt.Sprintf("%d/min", r.Count)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Count)
	case 24 * time.Hour:
		return fmt.Sprintf("%d/d", r.Count)
	}
	return strconv.FormatInt(r.Count, 10) + "/" + compactPeriod(r.Period)
}

// compactPeriod writes d as a rate's period is written: 2d, 2h, 1h30m,
// 1m30s, 250ms, without the zero units that Duration.String adds (2h0m0s).
func compactPeriod(d time.Duration) string {
	const day = 24 * time.Hour
	if d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// perSecond is the rate as events per second.
func (r Rate) perSecond() float64 {
	return float64(r.Count) / r.Period.Seconds()
}
