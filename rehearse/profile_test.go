package rehearse

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// perSecond counts the sends of p's schedule in each second, checking on
// the way that they are in order and inside the run.
func perSecond(t *testing.T, p Profile) []int {
	t.Helper()
	counts := make([]int, int((p.Duration+time.Second-1)/time.Second))
	s := p.Schedule()
	prev := time.Duration(-1)
	for {
		at, ok := s.Next()
		if !ok {
			break
		}
		if at < prev || at < 0 || at >= p.Duration {
			t.Fatalf("send at %v after %v, in a run of %v", at, prev, p.Duration)
		}
		prev = at
		counts[at/time.Second]++
	}
	if _, ok := s.Next(); ok {
		t.Fatal("Next went on after the end")
	}
	return counts
}

func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func near(got, want, tolerance int) bool { return got >= want-tolerance && got <= want+tolerance }

func TestScheduleConst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate     float64
		duration time.Duration
	}{
		{500, 2 * time.Second},
		{200, 2 * time.Second},
		{5000, 3 * time.Second},
		{7, 5 * time.Second},
		{333.3, 3 * time.Second},
		{0.5, 4 * time.Second},
	} {
		p := Profile{Shape: Const, Rate: tt.rate, Duration: tt.duration}
		counts := perSecond(t, p)
		want := tt.rate * tt.duration.Seconds()
		if got := sum(counts); math.Abs(float64(got)-want) > 1 {
			t.Errorf("%v: %d sends, want %v ± 1", p, got, want)
		}
		if tt.rate >= 1 {
			for sec, n := range counts {
				if math.Abs(float64(n)-tt.rate) > 1 {
					t.Errorf("%v: second %d has %d sends, want %v ± 1", p, sec, n, tt.rate)
				}
			}
		}
	}
	// 500/s is one request every 2 ms, the first at once.
	s := Profile{Shape: Const, Rate: 500, Duration: time.Second}.Schedule()
	for i := range 5 {
		at, _ := s.Next()
		if want := time.Duration(i) * 2 * time.Millisecond; at != want {
			t.Errorf("request %d at %v, want %v", i, at, want)
		}
	}
}

func TestScheduleStep(t *testing.T) {
	t.Parallel()
	p := Profile{Shape: Step, From: 100, Rate: 1000, StepAt: 2 * time.Second, Duration: 4 * time.Second}
	counts := perSecond(t, p)
	for sec, want := range []int{100, 100, 1000, 1000} {
		if !near(counts[sec], want, 1) {
			t.Errorf("second %d: %d sends, want %d ± 1 (all: %v)", sec, counts[sec], want, counts)
		}
	}
}

func TestScheduleSurge(t *testing.T) {
	t.Parallel()
	// A flash sale: 200/s, then 5,000 in the second the sale opens, back
	// near 1,000 within two seconds, unsteady there.
	p := Profile{Shape: Surge, From: 200, Rate: 5000, StepAt: 3 * time.Second, Duration: 20 * time.Second, Seed: 7}
	counts := perSecond(t, p)
	for sec := range 3 {
		if !near(counts[sec], 200, 1) {
			t.Errorf("second %d before the surge: %d sends, want 200", sec, counts[sec])
		}
	}
	if !near(counts[3], 5000, 1) {
		t.Errorf("second 3, the peak: %d sends, want 5000", counts[3])
	}
	if !near(counts[4], 3000, 2) {
		t.Errorf("second 4, falling from 5000 to 1000: %d sends, want 3000 (the mean)", counts[4])
	}
	varies := false
	for sec := 5; sec < 20; sec++ {
		if counts[sec] < 850 || counts[sec] > 1150 {
			t.Errorf("second %d of the plateau: %d sends, want 1000 ± 15%%", sec, counts[sec])
		}
		varies = varies || counts[sec] != counts[5]
	}
	if !varies {
		t.Errorf("the plateau does not vary: %v", counts[5:])
	}
	plateau := sum(counts[5:])
	if plateau < 15*950 || plateau > 15*1050 {
		t.Errorf("the plateau sums to %d over 15 s, want about 15000", plateau)
	}

	// The same seed gives the same schedule; another, another.
	again := perSecond(t, p)
	other := p
	other.Seed = 8
	differs := perSecond(t, other)
	for sec := range counts {
		if again[sec] != counts[sec] {
			t.Fatalf("second %d: %d sends, then %d with the same seed", sec, counts[sec], again[sec])
		}
	}
	if sum(differs[5:]) == plateau && differs[10] == counts[10] && differs[15] == counts[15] {
		t.Errorf("seeds 7 and 8 give the same plateau")
	}

	// An explicit plateau.
	p.Plateau = 400
	if got := perSecond(t, p); got[10] < 340 || got[10] > 460 {
		t.Errorf("plateau 400: second 10 has %d sends", got[10])
	}
}

// Poisson arrivals follow the rate on average, with gaps as random as
// independent clients' are: exponential, their standard deviation their
// mean.
func TestSchedulePoisson(t *testing.T) {
	t.Parallel()
	p := Profile{Shape: Step, From: 200, Rate: 2000, StepAt: 5 * time.Second, Duration: 10 * time.Second, Poisson: true, Seed: 3}
	counts := perSecond(t, p)
	// Within 4 standard deviations (the square root of the mean count).
	if n := sum(counts[:5]); !near(n, 1000, 130) {
		t.Errorf("%d sends before the step, want 1000 ± 130 (all: %v)", n, counts)
	}
	if n := sum(counts[5:]); !near(n, 10000, 400) {
		t.Errorf("%d sends after the step, want 10000 ± 400 (all: %v)", n, counts)
	}
	var gaps []float64
	s := p.Schedule()
	prev, _ := s.Next()
	for at, ok := s.Next(); ok; at, ok = s.Next() {
		if prev >= p.StepAt {
			gaps = append(gaps, float64(at-prev))
		}
		prev = at
	}
	var mean, sq float64
	for _, g := range gaps {
		mean += g
	}
	mean /= float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	if cv := math.Sqrt(sq/float64(len(gaps))) / mean; cv < 0.9 || cv > 1.1 {
		t.Errorf("the gaps' standard deviation is %.2f of their mean, want about 1 (exponential)", cv)
	}
	if d := time.Duration(mean); d < 450*time.Microsecond || d > 550*time.Microsecond {
		t.Errorf("gaps of %v on average at 2000/s, want 500µs", d)
	}

	// The same seed gives the same arrivals; another, others.
	if again := perSecond(t, p); !slices.Equal(again, counts) {
		t.Errorf("seed 3 twice: %v, then %v", counts, again)
	}
	p.Seed = 4
	if other := perSecond(t, p); slices.Equal(other, counts) {
		t.Errorf("seeds 3 and 4 give the same arrivals: %v", counts)
	}
	if got, want := p.String(), "step: 200/s, then 2000/s from 5s, for 10s, Poisson arrivals"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestProfileValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Profile
		want []string // in the error; none for a valid profile
	}{
		{"const", Profile{Shape: Const, Rate: 10, Duration: time.Second}, nil},
		{"step", Profile{Shape: Step, From: 0, Rate: 10, StepAt: time.Second, Duration: 2 * time.Second}, nil},
		{"surge", Profile{Shape: Surge, From: 200, Rate: 5000, StepAt: time.Second, Duration: 20 * time.Second}, nil},
		{"unknown shape", Profile{Shape: "ramp", Rate: 10, Duration: time.Second}, []string{`profile "ramp"`}},
		{"no rate, no duration", Profile{Shape: Const}, []string{"rate 0", "duration 0s"}},
		{"NaN rate", Profile{Shape: Const, Rate: math.NaN(), Duration: time.Second}, []string{"rate NaN"}},
		{"step past the end", Profile{Shape: Step, Rate: 10, StepAt: 5 * time.Second, Duration: 5 * time.Second}, []string{"step-at 5s"}},
		{"step at zero", Profile{Shape: Surge, Rate: 10, Duration: 5 * time.Second}, []string{"step-at 0s"}},
		{"negative from", Profile{Shape: Step, From: -1, Rate: 10, StepAt: time.Second, Duration: 5 * time.Second}, []string{"from -1"}},
		{"from with const", Profile{Shape: Const, From: 5, Rate: 10, Duration: time.Second}, []string{"not const"}},
		{"plateau with step", Profile{Shape: Step, Plateau: 5, Rate: 10, StepAt: time.Second, Duration: 2 * time.Second}, []string{"plateau applies"}},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want %q", tt.name, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, err, w)
			}
		}
	}
}

func TestRateAt(t *testing.T) {
	t.Parallel()
	p := Profile{Shape: Surge, From: 200, Rate: 5000, StepAt: 10 * time.Second, Duration: 30 * time.Second}
	for _, tt := range []struct {
		at   time.Duration
		want float64
	}{
		{-time.Second, 0},
		{0, 200},
		{10*time.Second - 1, 200},
		{10 * time.Second, 5000},
		{11*time.Second - 1, 5000},
		{11*time.Second + 500*time.Millisecond, 3000},
		{30 * time.Second, 0},
	} {
		if got := p.RateAt(tt.at); math.Abs(got-tt.want) > 0.01 {
			t.Errorf("RateAt(%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
}

func BenchmarkScheduleNext(b *testing.B) {
	b.ReportAllocs()
	p := Profile{Shape: Surge, From: 200, Rate: 5000, StepAt: time.Second, Duration: 1 << 62}
	s := p.Schedule()
	for b.Loop() {
		s.Next()
	}
}

func TestScheduleWholeSeconds(t *testing.T) {
	t.Parallel()
	// Rates whose per-millisecond share is not a binary fraction still
	// put the request due on a whole second in that second, not before.
	for _, rate := range []float64{1, 3, 10, 30, 100, 300, 700, 1000, 3000} {
		p := Profile{Shape: Const, Rate: rate, Duration: 5 * time.Second}
		counts := perSecond(t, p)
		for sec, n := range counts {
			if n != int(rate) {
				t.Errorf("%v/s: second %d has %d sends", rate, sec, n)
			}
		}
	}
	p := Profile{Shape: Const, Rate: 100, Duration: 500 * time.Millisecond}
	if got := sum(perSecond(t, p)); got != 50 {
		t.Errorf("100/s for 500ms: %d sends, want 50", got)
	}
}
