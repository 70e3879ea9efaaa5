package rehearse

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// A Shape is the form of a load profile over time.
type Shape string

const (
	// Const offers Rate for the whole Duration.
	Const Shape = "const"
	// Step offers From until StepAt, then Rate.
	Step Shape = "step"
	// Surge is a flash sale's opening: From until StepAt, then a jump to
	// Rate held for a second, a fall to Plateau over the next second, and
	// Plateau with jitter for the rest of the run.
	Surge Shape = "surge"
)

// The surge's timing and the plateau's jitter. A sale that opens at 10:00:00
// goes from 200 to 5,000 requests per second in one second and is back near
// 1,000 a second or two later, where it stays, unsteady.
const (
	surgeHold     = time.Second            // the peak lasts this long
	surgeFall     = time.Second            // then falls linearly to the plateau over this
	plateauJitter = 0.15                   // the plateau varies by up to ±15%
	jitterStep    = 200 * time.Millisecond // drawn afresh this often
)

// scheduleStep is the resolution of a Schedule: the rate is taken as
// constant within each millisecond, which is exact for Const and Step
// profiles whose times are whole milliseconds.
const scheduleStep = time.Millisecond

// A Profile says how many requests per second to offer at each moment of a
// run. Its methods are pure: the same Profile gives the same schedule.
type Profile struct {
	Shape Shape
	// Rate is in requests per second: the rate of the whole run (Const),
	// after StepAt (Step), or the peak of the surge (Surge).
	Rate float64
	// From is the rate before StepAt (Step and Surge).
	From float64
	// StepAt is when the step or the surge happens (Step and Surge); it
	// must fall inside the run.
	StepAt time.Duration
	// Plateau is the rate a surge settles at (Surge). Zero means Rate/5.
	Plateau float64
	// Duration is the length of the run.
	Duration time.Duration
	// Poisson sends the requests at random times, as independent clients
	// arrive: the gaps between them are drawn from an exponential
	// distribution whose mean follows the rate. False spaces them evenly.
	// Two runs of evenly spaced requests at one rate keep their phase
	// against each other for the whole run, and a gateway that admits
	// some of their requests can favour one of them throughout; random
	// arrivals cannot lock so.
	Poisson bool
	// Seed draws the plateau's jitter (Surge) and the Poisson arrivals.
	Seed uint64
}

// Validate reports every problem of p.
func (p Profile) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if p.Duration <= 0 {
		bad("duration %v: must be positive", p.Duration)
	}
	if !(p.Rate > 0) || math.IsInf(p.Rate, 0) {
		bad("rate %v: must be a positive number of requests per second", p.Rate)
	}
	switch p.Shape {
	case Const:
		if p.From != 0 || p.StepAt != 0 {
			bad("from and step-at apply to the step and surge profiles, not const")
		}
	case Step, Surge:
		if !(p.From >= 0) || math.IsInf(p.From, 0) {
			bad("from %v: must be zero or a positive number of requests per second", p.From)
		}
		if p.StepAt <= 0 || (p.Duration > 0 && p.StepAt >= p.Duration) {
			bad("step-at %v: must be after the start and before the end of the %v run", p.StepAt, p.Duration)
		}
	default:
		bad("profile %q: must be const, step or surge", p.Shape)
	}
	if p.Shape != Surge && p.Plateau != 0 {
		bad("plateau applies to the surge profile only")
	}
	if !(p.Plateau >= 0) || math.IsInf(p.Plateau, 0) {
		bad("plateau %v: must be zero (rate/5) or a positive number of requests per second", p.Plateau)
	}
	return errors.Join(errs...)
}

func (p Profile) plateau() float64 {
	if p.Plateau == 0 {
		return p.Rate / 5
	}
	return p.Plateau
}

// String describes p in a few words, as the load command prints it.
func (p Profile) String() string {
	if p.Poisson {
		q := p
		q.Poisson = false
		return q.String() + ", Poisson arrivals"
	}
	switch p.Shape {
	case Step:
		return fmt.Sprintf("step: %g/s, then %g/s from %v, for %v", p.From, p.Rate, p.StepAt, p.Duration)
	case Surge:
		return fmt.Sprintf("surge: %g/s, a jump to %g/s at %v settling at %g/s, for %v",
			p.From, p.Rate, p.StepAt, p.plateau(), p.Duration)
	default:
		return fmt.Sprintf("%s: %g/s for %v", p.Shape, p.Rate, p.Duration)
	}
}

// RateAt returns the requests per second p offers at t after the start;
// zero outside the run.
func (p Profile) RateAt(t time.Duration) float64 {
	if t < 0 || t >= p.Duration {
		return 0
	}
	switch p.Shape {
	case Const:
		return p.Rate
	case Step:
		if t < p.StepAt {
			return p.From
		}
		return p.Rate
	case Surge:
		d := t - p.StepAt
		plateau := p.plateau()
		switch {
		case d < 0:
			return p.From
		case d < surgeHold:
			return p.Rate
		case d < surgeHold+surgeFall:
			return p.Rate + (plateau-p.Rate)*float64(d-surgeHold)/float64(surgeFall)
		default:
			step := uint64((d - surgeHold - surgeFall) / jitterStep)
			return max(0, plateau*(1+plateauJitter*uniform(p.Seed, step)))
		}
	}
	return 0
}

// uniform returns a number in [-1, 1) that depends only on seed and i, so
// that RateAt needs no state: splitmix64 of the pair.
func uniform(seed, i uint64) float64 {
	z := seed*0x9e3779b97f4a7c15 + i + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11)/(1<<53)*2 - 1
}

// Schedule returns the send times of p's requests.
func (p Profile) Schedule() *Schedule {
	s := &Schedule{p: p}
	if p.Poisson {
		s.rng = rand.New(rand.NewPCG(p.Seed, p.Seed^0x2545f4914f6cdd1d))
		s.k = s.rng.ExpFloat64()
	}
	return s
}

// A Schedule lists the send times of a profile's requests, in order: request
// k is due when the rate integrated from the start reaches k, so request 0
// is due at once and a constant 500/s sends at 0, 2 ms, 4 ms, … With
// Poisson arrivals, request k is due when it reaches the sum of k+1 draws
// of an exponential distribution of mean 1. It is computed as it is read,
// in constant memory, however long the run.
type Schedule struct {
	p   Profile
	t   time.Duration // the start of the current step
	acc float64       // requests due before t: the rate integrated over [0, t)
	k   float64       // where the integrated rate makes the next request due
	rng *rand.Rand    // draws the Poisson gaps; nil for evenly spaced requests
}

// Next returns the send time of the next request, after the start of the
// run; ok is false once the run is over.
func (s *Schedule) Next() (at time.Duration, ok bool) {
	for s.t < s.p.Duration {
		end := min(s.t+scheduleStep, s.p.Duration)
		dt := (end - s.t).Seconds()
		r := s.p.RateAt(s.t + (end-s.t)/2)
		if r > 0 && s.acc+r*dt > s.k {
			// Rounded to the nanosecond, so that the float error of the
			// sum does not move a request due on a whole second to just
			// before it, into the previous second.
			at = s.t + time.Duration(math.Round((s.k-s.acc)/r*float64(time.Second)))
			if at >= s.p.Duration {
				break
			}
			if s.rng != nil {
				s.k += s.rng.ExpFloat64()
			} else {
				s.k++
			}
			return at, true
		}
		s.acc += r * dt
		// Summing steps such as 0.2 drifts from the integers the
		// schedule is counted in; snapping keeps a constant rate's
		// requests on whole seconds where they belong.
		if n := math.Round(s.acc); math.Abs(s.acc-n) < 1e-9 {
			s.acc = n
		}
		s.t = end
	}
	s.t = s.p.Duration
	return 0, false
}
