package limit

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
	}{
		{"800/s", Rate{800, time.Second}},
		{"1/10s", Rate{1, 10 * time.Second}},
		{"100/min", Rate{100, time.Minute}},
		{"100/m", Rate{100, time.Minute}},
		{"2/h", Rate{2, time.Hour}},
		{"1000/d", Rate{1000, 24 * time.Hour}},
		{"100:60", Rate{100, time.Minute}},
		{"5/250ms", Rate{5, 250 * time.Millisecond}},
		{"3/2d", Rate{3, 48 * time.Hour}},
		{"100/1m30s", Rate{100, 90 * time.Second}},
		{" 7 / 5min ", Rate{7, 5 * time.Minute}},
		{"100/minute", Rate{100, time.Minute}},
		{"100/second", Rate{100, time.Second}},
		{"5/2hours", Rate{5, 2 * time.Hour}},
		{"1/day", Rate{1, 24 * time.Hour}},
		{"3/10seconds", Rate{3, 10 * time.Second}},
		{"60/hour", Rate{60, time.Hour}},
		{"7/days", Rate{7, 24 * time.Hour}},
		{"9/5mins", Rate{9, 5 * time.Minute}},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0/s", "count 0 must be positive"},
		{"-5/s", "count -5 must be positive"},
		{"5/fortnight", `unknown unit or duration "fortnight"`},
		{"5/500us", "shorter than 1ms"},
		{"5/0s", "shorter than 1ms"},
		{"5", "want N/UNIT"},
		{"", "want N/UNIT"},
		{"x/s", `count "x" is not a whole number`},
		{"1.5/s", `count "1.5" is not a whole number`},
		{"100:0", `window "0" is not a positive number of seconds`},
		{"2000000000/s", "above the maximum"},
		{"1/99999d", "out of range"},
	} {
		_, err := ParseRate(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseRate(%q) error = %v; want it to name the value and say %q", tc.in, err, tc.want)
		}
	}
}

// String writes a rate as a file would, without Duration's zero units.
func TestRateString(t *testing.T) {
	for _, tc := range []struct {
		r    Rate
		want string
	}{
		{Rate{800, time.Second}, "800/s"},
		{Rate{100, time.Minute}, "100/min"},
		{Rate{1, 10 * time.Second}, "1/10s"},
		{Rate{3, 2 * time.Hour}, "3/2h"},
		{Rate{3, 48 * time.Hour}, "3/2d"},
		{Rate{5, 90 * time.Minute}, "5/1h30m"},
		{Rate{5, 10 * time.Minute}, "5/10m"},
		{Rate{5, time.Hour + 30*time.Second}, "5/1h0m30s"},
		{Rate{5, 250 * time.Millisecond}, "5/250ms"},
		{Rate{5, 1500 * time.Millisecond}, "5/1.5s"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.r, got, tc.want)
		}
		if back, err := ParseRate(tc.r.String()); err != nil || back != tc.r {
			t.Errorf("%q reads back as %v, %v", tc.r.String(), back, err)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"800/s", "1/10s", "100:60", "5/1h30m", "0/s", "9/d", "1/-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r.Count <= 0 || r.Count > MaxCount || r.Period < MinPeriod || r.Period > maxPeriod {
			t.Fatalf("ParseRate(%q) = %+v: out of the valid range", s, r)
		}
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %v, but its String %q reads back as %v, %v", s, r, r.String(), back, err)
		}
	})
}
