package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
)

//go:embed decide.lua
var decideSource string

// decideScript runs with EVALSHA, and EVAL when Redis answers NOSCRIPT
// (a restarted or flushed server): NOSCRIPT means the script did not run,
// so sending it again cannot count a request twice.
var decideScript = rueidis.NewLuaScript(decideSource)

// The ARGV layout of decide.lua: base global arguments, then stride per limit.
const (
	base   = 4
	stride = 8
)

// ruleArgs are a rule's arguments to decide.lua, formatted once per rule
// and cached on the rule (limit.Rule.Ext) so that a decision formats only
// what changes from call to call.
type ruleArgs struct {
	static [6]string // algorithm, shadow, n, window or lease ttl, tokens per µs, queue
	n      int64
	cost   int64
	costS  string
	zone   bool // fixed window aligned on a Location's day or hour: its offset is per call
}

// owner is the key of this package's values in limit.Rule.Ext. The
// arguments do not depend on the store, so all Stores share them.
type owner struct{}

func argsOf(r *limit.Rule) *ruleArgs { return r.Ext(owner{}, buildArgs).(*ruleArgs) }

func buildArgs(r *limit.Rule) any {
	n, window, cost, queue, lease := r.Params()
	a := &ruleArgs{n: n, cost: cost, costS: strconv.FormatInt(cost, 10)}
	alg, w, per := "", window, "0"
	switch r.Algorithm {
	case limit.FixedWindow:
		alg = "f"
		if r.Align == limit.AlignFirst {
			alg = "F"
		} else {
			a.zone = r.Location != nil && r.Location != time.UTC
		}
	case limit.SlidingWindow:
		alg = "s"
	case limit.TokenBucket:
		alg = "t"
		// The same expression as the rule's own rate, printed so that
		// Lua reads back the same double.
		per = strconv.FormatFloat(float64(r.Rate.Count)/float64(window), 'g', -1, 64)
	case limit.Concurrency:
		alg, w = "c", lease
	}
	shadow := "0"
	if r.Shadow {
		shadow = "1"
	}
	a.static = [6]string{alg, shadow, strconv.FormatInt(n, 10), strconv.FormatInt(w, 10), per, strconv.FormatInt(queue, 10)}
	return a
}

// maxCost keeps cost × hits exact in a Lua double. Any cost this large is
// above every limit (limit.MaxCount), so it is rejected all the same.
const maxCost = 1 << 53

func (a *ruleArgs) appendTo(args []string, r *limit.Rule, hits int64, now time.Time) []string {
	cost := a.costS
	if hits > 1 {
		c := int64(maxCost)
		if hits < maxCost/a.cost {
			c = a.cost * hits
		}
		cost = strconv.FormatInt(c, 10)
	}
	zone := "0"
	if a.zone {
		zone = strconv.FormatInt(r.ZoneOffset(now), 10)
	}
	args = append(args, a.static[:]...)
	return append(args, cost, zone)
}

func (s *Store) offsetArg() string {
	if v := s.offset.Load(); v != 0 {
		return strconv.FormatInt(v, 10)
	}
	return "0"
}

// Decide implements limit.Store with one script call for every limit of
// the request. The script reads Redis TIME, so gateways whose clocks
// disagree still agree on every window; req.Now gives only the zone offset
// of rules with a Location.
func (s *Store) Decide(ctx context.Context, req *limit.Request) (limit.Result, error) {
	if err := limit.ValidateRequest(req); err != nil {
		return limit.Result{}, err
	}
	n := len(req.Limits)
	if n == 0 {
		return limit.Result{Allowed: true, Decisions: []limit.Decision{}, Time: req.Now}, nil
	}
	c, err := s.get("decide")
	if err != nil {
		return limit.Result{}, err
	}
	keys := make([]string, n)
	args := make([]string, base, base+stride*n)
	args[0], args[1], args[3] = "d", s.offsetArg(), req.Lease
	sliding := false
	for i, l := range req.Limits {
		keys[i] = limit.StoredKey(s.prefix, l.Rule, l.Key)
		args = argsOf(l.Rule).appendTo(args, l.Rule, req.Hits, req.Now)
		sliding = sliding || l.Rule.Algorithm == limit.SlidingWindow
	}
	if sliding {
		args[2] = s.token + strconv.FormatUint(s.seq.Add(1), 36)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := decideScript.Exec(ctx, c, keys, args).ToArray()
	if err != nil {
		return limit.Result{}, unavailable("decide", err)
	}
	if len(v) != 3+5*n {
		return limit.Result{}, unavailable("decide", fmt.Errorf("script returned %d values for %d limits", len(v), n))
	}
	var bad error
	num := func(i int) int64 {
		x, err := v[i].AsInt64()
		if err != nil && bad == nil {
			bad = err
		}
		return x
	}
	res := limit.Result{
		Allowed:   num(2) == 1,
		Decisions: make([]limit.Decision, n),
		Time:      time.UnixMicro(num(0)*1e6 + num(1)),
	}
	for i, l := range req.Limits {
		o := 3 + 5*i
		d := limit.Decision{
			Rule:       l.Rule,
			Key:        l.Key,
			Allowed:    num(o) == 1,
			Limit:      argsOf(l.Rule).n,
			Remaining:  num(o + 1),
			ResetAfter: us(num(o + 2)),
			RetryAfter: us(num(o + 3)),
			Delay:      us(num(o + 4)),
		}
		if res.Allowed && d.Allowed {
			res.Delay = max(res.Delay, d.Delay)
		}
		res.Decisions[i] = d
	}
	if bad != nil {
		return limit.Result{}, unavailable("decide", bad)
	}
	return res, nil
}

// Peek implements limit.Store. It runs decide.lua in its read mode, which
// removes expired entries and writes nothing else.
func (s *Store) Peek(ctx context.Context, now time.Time, r *limit.Rule, k limit.Key) (limit.State, error) {
	if err := r.Validate(); err != nil {
		return limit.State{}, err
	}
	c, err := s.get("peek")
	if err != nil {
		return limit.State{}, err
	}
	a := argsOf(r)
	args := make([]string, base, base+stride)
	args[0], args[1] = "p", s.offsetArg()
	args = a.appendTo(args, r, 1, now)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := decideScript.Exec(ctx, c, []string{limit.StoredKey(s.prefix, r, k)}, args).AsIntSlice()
	if err != nil {
		return limit.State{}, unavailable("peek", err)
	}
	if len(v) != 5 {
		return limit.State{}, unavailable("peek", fmt.Errorf("script returned %d values", len(v)))
	}
	return limit.State{
		Algorithm:  r.Algorithm,
		Limit:      a.n,
		Window:     r.Window(),
		Remaining:  v[2],
		ResetAfter: us(v[3]),
		InFlight:   v[4],
	}, nil
}

// Reset implements limit.Store.
func (s *Store) Reset(ctx context.Context, r *limit.Rule, k limit.Key) error {
	if err := r.Validate(); err != nil {
		return err
	}
	c, err := s.get("reset")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return unavailable("reset", c.Do(ctx, c.B().Del().Key(limit.StoredKey(s.prefix, r, k)).Build()).Error())
}

func us(v int64) time.Duration {
	if v > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Microsecond
}
