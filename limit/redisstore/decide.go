package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
	"github.com/floodgate-gw/floodgate/limit/internal/exhausted"
)

// decideSource is decide.lua, the script every decision runs.
//
// KEYS[i] is the state of limit i. A request's keys are distinct: limits
// on one counter, which is one key, are merged into one whose cost is
// their sum before the store decides (core.DecideMerged). ARGV:
//
//	1  mode: "d" decides a request whose limits are all fixed windows
//	   (but a zone's window next to a change of offset), "D" any other
//	   request, "p" peeks at KEYS[1] (Peek), "b" a batch of requests of
//	   mode d, "r" gives back (below)
//	2  clock offset µs added to TIME: 0, except in tests
//	3  decision token: makes sliding-window members unique (token:i, token:i:copy)
//	4  lease id, for concurrency limits
//	then per limit, from 5:
//	   algorithm (f fixed epoch, z fixed epoch in a Location, F fixed
//	   first, s sliding, t bucket, c concurrency), shadow (0|1), n (count,
//	   burst or limit), window µs (lease ttl µs for concurrency), cost
//	   (rule cost × hits); then for z the zone offset µs and four bounds
//	   µs, or for t tokens per µs and queue µs. For z, window, offset and
//	   bounds are core.ZoneNear's at the caller's time: the window
//	   that holds it (on a day the zone's offset changes, a day window's
//	   real length and an offset that puts its start at local midnight),
//	   and the bounds of it and its two neighbours, among which the script
//	   places Redis's time
//
// A limit's first four arguments (and a bucket's last two) are formatted
// once per rule and cached with ruledata.Ext. The reply is a flat integer
// array: the store's time in µs, then three numbers per limit: remaining,
// reset after µs, and the delay µs if the limit admits the request or
// -1 - retry after µs if it rejects it. The request is admitted when every
// limit that is not a shadow admits it. In "p" mode the reply is the time,
// remaining, reset after µs and the leases in flight.
//
// In "r" mode KEYS are the keys of an earlier "d" or "D" call and a marker
// key in their slot; ARGV are that call's, with cost 0 for the limits that
// took nothing, and then the time it decided at. The reply is the time and
// then, per limit, remaining and reset after µs once given back.
//
// In "b" mode KEYS are the distinct keys of the batch, ARGV 3 is the
// number of requests and ARGV 4 the number of distinct sets of limit
// arguments. ARGV 5 holds the sets, 30 bytes each: the algorithm's and the
// shadow flag's characters as in "d", then n, window, cost and the zone
// offset plus 2^47 as 56-bit numbers, high byte first. ARGV 6 holds the
// requests as 16-bit numbers, high byte first: each request's number of
// limits and, per limit, the index of its key in KEYS and of its argument
// set (a batch holds at most 256 limits). The reply is the time and then,
// for every limit of every request in order, the three numbers of "d" for
// a window aligned to its first admission (F), and one for a window
// aligned to the clock (f, z): the remaining count where the limit admits
// the request, -1 - the remaining count where it rejects it. Those
// windows' reset and retry follow from the time, the window and the zone
// offset, so the store works them out as the script would (about 500
// instructions of Redis's per number it does not send back).
//
// Fixed windows were hashes {s, c} before they were strings, a layout that
// cost Redis more CPU per decision. The script reads them with MGET, which
// reads a key of another type as nil, so a window left as a hash is no
// window: after an upgrade each such key forgets at most one window's
// count and is replaced as a string by its next admission.
//
//go:embed decide.lua
var decideSource string

// decideScript runs with EVALSHA, and EVAL when Redis answers NOSCRIPT
// (a restarted or flushed server): NOSCRIPT means the script did not run,
// so sending it again cannot count a request twice.
var decideScript = rueidis.NewLuaScript(decideSource)

// base is the number of decide.lua's global arguments; the arguments of
// each limit follow them (decideSource).
const base = 4

// ruleArgs are a rule's arguments to decide.lua, formatted once per rule
// and cached on the rule (ruledata.Ext) so that a decision formats only
// what changes from call to call.
type ruleArgs struct {
	head  [4]string // algorithm, shadow, n, window or lease ttl
	tail  []string  // after the cost: tokens per µs and queue (token bucket)
	n, w  int64     // count, and window or lease ttl in µs
	costS string
	zone  bool // fixed window aligned on a Location's day or hour: its offset is per call

	rejections rejections // on a cluster, how often the rule rejects (slots.go)

	first atomic.Pointer[storedKey] // the first key decided on the rule (storedKey)
}

// storedKey is where a store with prefix keeps a rule's state for key.
type storedKey struct {
	prefix string
	key    limit.Key
	stored string
}

// storedKey is core.StoredKey for l. A rule keeps the first key it is
// decided on, so that a rule whose key never changes (a global limit, a
// route's) makes no string per decision; a rule of many keys compares one.
func (s *Store) storedKey(l limit.Limit) string {
	a := argsOf(l.Rule)
	if k := a.first.Load(); k != nil && k.key == l.Key && k.prefix == s.prefix {
		return k.stored
	}
	stored := core.StoredKey(s.prefix, l.Rule, l.Key)
	if a.first.Load() == nil {
		a.first.CompareAndSwap(nil, &storedKey{prefix: s.prefix, key: l.Key, stored: stored})
	}
	return stored
}

// bufKey is storedKey for l, made in *buf where it is not the rule's
// first key: the string is valid until *buf is written again from where
// it is now.
func (s *Store) bufKey(l limit.Limit, buf *[]byte) string {
	a := argsOf(l.Rule)
	k := a.first.Load()
	if k == nil {
		return s.storedKey(l)
	}
	if k.key == l.Key && k.prefix == s.prefix {
		return k.stored
	}
	start := len(*buf)
	*buf = core.AppendStoredKey(*buf, s.prefix, l.Rule, l.Key)
	return unsafe.String(&(*buf)[start], len(*buf)-start)
}

// owner is the key of this package's values in ruledata.Ext. The
// arguments do not depend on the store, so all Stores share them.
type owner struct{}

func argsOf(r *limit.Rule) *ruleArgs { return ruledata.Ext(r, owner{}, buildArgs).(*ruleArgs) }

func buildArgs(r *limit.Rule) any {
	p := core.Params(r)
	n, window, cost, queue, lease := p.N, p.Window, p.Cost, p.Queue, p.Lease
	a := &ruleArgs{n: n, costS: strconv.FormatInt(cost, 10)}
	alg, w := "", window
	switch r.Algorithm {
	case limit.FixedWindow:
		switch {
		case r.Align == limit.AlignFirst:
			alg = "F"
		case r.Location != nil && r.Location != time.UTC:
			alg, a.zone = "z", true
		default:
			alg = "f"
		}
	case limit.SlidingWindow:
		alg = "s"
	case limit.TokenBucket:
		alg = "t"
		// The same expression as the rule's own rate, printed so that
		// Lua reads back the same double.
		per := strconv.FormatFloat(float64(r.Rate.Count)/float64(window), 'g', -1, 64)
		a.tail = []string{per, strconv.FormatInt(queue, 10)}
	case limit.Concurrency:
		alg, w = "c", lease
	}
	shadow := "0"
	if r.Shadow {
		shadow = "1"
	}
	a.w = w
	a.head = [4]string{alg, shadow, strconv.FormatInt(n, 10), strconv.FormatInt(w, 10)}
	return a
}

// appendTo appends r's arguments for a request of hits at now. alike is
// false for a zone's window next to a change of offset (core.ZoneNear),
// whose request is not batched: a batch places windows by one window and
// offset.
func (a *ruleArgs) appendTo(args []string, r *limit.Rule, hits int64, now time.Time) (_ []string, alike bool) {
	if a.zone {
		// The window and offset of the zone's window at now (a window
		// across a change of the offset is longer or shorter), and the
		// bounds of it and its neighbours, among which the script places
		// its own time.
		z, near, alike := core.ZoneNear(r, now)
		w := a.head[3]
		if z.Window != a.w {
			w = strconv.FormatInt(z.Window, 10)
		}
		args = append(args, a.head[0], a.head[1], a.head[2], w, a.costArg(r, hits), strconv.FormatInt(z.Off, 10))
		for _, b := range near {
			args = append(args, strconv.FormatInt(b, 10))
		}
		return args, alike
	}
	args = append(append(args, a.head[:]...), a.costArg(r, hits))
	return append(args, a.tail...), true
}

// zoneArgs is how many arguments a limit of algorithm z takes after its
// head (appendTo): cost, offset and four bounds.
const zoneArgs = 6

// costArg is the cost argument of a request of hits on r: r.CostOf, at
// most core.MaxCost, which a Lua double holds exactly.
func (a *ruleArgs) costArg(r *limit.Rule, hits int64) string {
	if hits <= 1 {
		return a.costS
	}
	return strconv.FormatInt(core.CostOf(r, hits), 10)
}

func (s *Store) offsetArg() string {
	if v := s.offset.Load(); v != 0 {
		return strconv.FormatInt(v, 10)
	}
	return "0"
}

// scriptCall is the keys and arguments of one decide.lua call. They are
// pooled: rueidis copies both slices into its command, so they are free
// again once the command is built. The keys that are not a rule's first
// are made in kbuf, and a batch's two strings of numbers are reqs and
// setb: rueidis writes their bytes when it sends the command, so they
// are free once the call has returned, unless it failed, when the
// command may still be waiting to be written (dropBufs).
type scriptCall struct {
	keys, args []string
	kbuf       []byte
	reqs, setb []byte         // a batch's requests and argument sets, before they join args
	sets       []argSet       // a batch's distinct limit arguments
	index      map[string]int // a batch's key indexes
}

var calls = sync.Pool{New: func() any { return new(scriptCall) }}

// decideCall fills c with the script's keys and arguments for req.
func (s *Store) decideCall(c *scriptCall, req *limit.Request) {
	c.keys, c.kbuf = c.keys[:0], c.kbuf[:0]
	for _, l := range req.Limits {
		c.keys = append(c.keys, s.bufKey(l, &c.kbuf))
	}
	s.decideArgs(c, req)
}

// decideArgs fills c with the script's arguments for req, whose keys c
// holds.
func (s *Store) decideArgs(c *scriptCall, req *limit.Request) {
	c.args = append(c.args[:0], "d", s.offsetArg(), "", req.Lease)
	fixed, sliding := true, false
	for _, l := range req.Limits {
		var alike bool
		c.args, alike = argsOf(l.Rule).appendTo(c.args, l.Rule, req.Hits, req.Now)
		fixed = fixed && l.Rule.Algorithm == limit.FixedWindow && alike
		sliding = sliding || l.Rule.Algorithm == limit.SlidingWindow
	}
	if sliding {
		c.args[2] = s.token + strconv.FormatUint(s.seq.Add(1), 36)
	}
	// Mode d spares the script the work that only other requests need.
	// A request's keys are distinct in either mode: its limits on one
	// counter, which is one stored key, were merged (core.DecideMerged).
	// A zone's window next to a change of offset goes by mode D, which is
	// never batched.
	if !fixed {
		c.args[0] = "D"
	}
}

// dropBufs lets the strings made in c's buffers live on with a call that
// failed: c gets new buffers.
func (c *scriptCall) dropBufs() { c.kbuf, c.reqs, c.setb = nil, nil, nil }

// put returns c to the pool, without the strings it points to.
func (c *scriptCall) put() {
	clear(c.keys)
	clear(c.args)
	c.reqs, c.setb = c.reqs[:0], c.setb[:0]
	clear(c.sets)
	clear(c.index)
	calls.Put(c)
}

// Decide implements limit.Store with one script call for every limit of
// the request. The script reads Redis TIME, so gateways whose clocks
// disagree still agree on every window; req.Now gives only where the
// windows of rules with a Location lie (core.ZoneAt).
func (s *Store) Decide(ctx context.Context, req *limit.Request) (limit.Result, error) {
	return core.DecideMerged(req, func(req *limit.Request) (limit.Result, error) { return s.decide(ctx, req) })
}

// decide decides a valid request whose limits are all on different
// counters, and so on different keys (core.DecideMerged): from the
// store's memory of exhausted keys when one of them is, from Redis else.
func (s *Store) decide(ctx context.Context, req *limit.Request) (limit.Result, error) {
	if len(req.Limits) == 0 {
		return s.decideRemote(ctx, req)
	}
	if s.local != nil {
		if res, ok := s.decideLocal(req); ok {
			return res, nil
		}
	}
	for _, l := range req.Limits {
		if l.Rule.Sliced {
			return s.decideSliced(ctx, req)
		}
	}
	return s.decideNoted(ctx, req)
}

// decideNoted decides req in Redis and notes what the answers say of
// exhausted keys.
func (s *Store) decideNoted(ctx context.Context, req *limit.Request) (limit.Result, error) {
	if s.local == nil {
		return s.decideRemote(ctx, req)
	}
	gen, now := s.local.Gen(), s.mono()
	res, err := s.decideRemote(ctx, req)
	if err == nil {
		call := exhausted.Call{Sent: now, Recv: s.mono(), At: res.Time}
		for i, l := range req.Limits {
			s.local.Note(gen, call, l, core.CostOf(l.Rule, req.Hits), &res.Decisions[i])
		}
	}
	return res, err
}

// heldUnits is what limit i of a request took from its slice, which ends
// at until.
type heldUnits struct {
	i     int
	cost  int64
	until int64
}

// decideSliced decides a request with sliced limits: those from this
// instance's slices, the others in one Redis call, as before. A limit
// whose window has nothing left rejects the request at once, as a limit
// known to be exhausted does; a request another limit rejects gets back
// what it took from the slices.
func (s *Store) decideSliced(ctx context.Context, req *limit.Request) (limit.Result, error) {
	ds := core.Decisions(req, len(req.Limits))
	var heldArr [4]heldUnits
	held := heldArr[:0]
	giveBack := func() { // what the slices gave a request that is not admitted
		for _, t := range held {
			s.unTake(req.Limits[t.i], t.cost, t.until)
		}
	}
	rest := limit.Request{Now: req.Now, Lease: req.Lease, Hits: req.Hits}
	var restAt []int
	at := int64(0)
	for i, l := range req.Limits {
		if !l.Rule.Sliced {
			rest.Limits, restAt = append(rest.Limits, l), append(restAt, i)
			continue
		}
		cost := core.CostOf(l.Rule, req.Hits)
		t, err := s.take(ctx, l, cost)
		if err != nil {
			giveBack()
			return limit.Result{}, err
		}
		switch t.how {
		case remote:
			rest.Limits, restAt = append(rest.Limits, l), append(restAt, i)
			continue
		case empty:
			if !l.Rule.Shadow {
				giveBack()
				for j, o := range req.Limits {
					ds[j] = limit.Decision{Rule: o.Rule, Key: o.Key, Allowed: true, Undecided: true, Limit: core.Limit(o.Rule)}
				}
				ds[i] = t.d
				return limit.Result{Decisions: ds, Time: time.UnixMicro(t.at)}, nil
			}
		case taken:
			held = append(held, struct {
				i     int
				cost  int64
				until int64
			}{i, cost, t.until})
		}
		ds[i] = t.d
		if at == 0 {
			at = t.at
		}
	}
	res := limit.Result{Allowed: true, Decisions: ds, Time: time.UnixMicro(at)}
	if len(rest.Limits) == 0 {
		return res, nil
	}
	rr, err := s.decideNoted(ctx, &rest)
	if err != nil {
		giveBack()
		return limit.Result{}, err
	}
	for j, i := range restAt {
		ds[i] = rr.Decisions[j]
	}
	res.Allowed, res.Time, res.Delay = rr.Allowed, rr.Time, rr.Delay
	if !rr.Allowed {
		giveBack()
		for _, t := range held {
			ds[t.i].Remaining += t.cost
		}
	}
	return res, nil
}

// decideLocal rejects req if the store knows that one of its limits, the
// first in req's order, cannot admit it now. The others were not asked:
// they consumed nothing and are Undecided, as behind a rejection on a
// cluster.
func (s *Store) decideLocal(req *limit.Request) (limit.Result, bool) {
	// The time of the look-up itself: an earlier one, read before this
	// goroutine waited for a core, could find an entry that has ended.
	now := s.mono()
	for i, l := range req.Limits {
		d, at, ok := s.local.Lookup(l.Rule, l.Key, core.CostOf(l.Rule, req.Hits), now)
		if !ok {
			continue
		}
		res := limit.Result{Decisions: core.Decisions(req, len(req.Limits)), Time: at}
		for j, o := range req.Limits {
			res.Decisions[j] = limit.Decision{Rule: o.Rule, Key: o.Key, Allowed: true, Undecided: true, Limit: core.Limit(o.Rule)}
		}
		res.Decisions[i] = d
		return res, true
	}
	return limit.Result{}, false
}

// decideRemote decides req in Redis.
func (s *Store) decideRemote(ctx context.Context, req *limit.Request) (limit.Result, error) {
	n := len(req.Limits)
	if n == 0 {
		return limit.Result{Allowed: true, Decisions: []limit.Decision{}, Time: req.Now}, nil
	}
	c, err := s.get("decide")
	if err != nil {
		return limit.Result{}, err
	}
	if s.mode == Cluster {
		return s.decideSlots(ctx, c, req)
	}
	g := &s.whole
	ok, probe := s.enter(g)
	if !ok {
		return limit.Result{}, resting("decide", g)
	}
	sc := calls.Get().(*scriptCall)
	s.decideCall(sc, req)
	var res limit.Result
	start := s.mono()
	if sc.args[0] == "d" && n <= maxBatchLimits {
		res, err = s.coalesce(ctx, c, req, sc)
	} else {
		res, err = s.decideOne(ctx, c, req, sc)
	}
	s.leave(g, probe, s.callerGone(ctx, start, err))
	return res, err
}

// callerGone is err, the error of a call made for ctx from start, or
// context.Canceled when the caller's own context ended before the store's
// timeout did (a caller's deadline shorter than store.timeout, as Envoy's
// 20 ms for a rate-limit call): the call then says nothing of the node,
// which leave takes as no news.
func (s *Store) callerGone(ctx context.Context, start int64, err error) error {
	if err != nil && ctx.Err() != nil && s.mono()-start < int64(s.timeout) {
		return context.Canceled
	}
	return err
}

// decideOne sends one request's script call and puts sc back.
func (s *Store) decideOne(ctx context.Context, c rueidis.Client, req *limit.Request, sc *scriptCall) (limit.Result, error) {
	cctx := withTimeout(ctx, s.timeout)
	v, err := decideScript.Exec(cctx, c, sc.keys, sc.args).ToArray()
	if err != nil {
		cctx.discard()
		sc.dropBufs()
	} else {
		cctx.release()
	}
	sc.put()
	if err != nil {
		return limit.Result{}, unavailable("decide", err)
	}
	if len(v) != 1+3*len(req.Limits) {
		return limit.Result{}, unavailable("decide", fmt.Errorf("script returned %d values for %d limits", len(v), len(req.Limits)))
	}
	return result(req, v[0], v[1:])
}

// result is req's answer from the script's reply: the time, and v, three
// numbers per limit.
func result(req *limit.Request, now rueidis.RedisMessage, v []rueidis.RedisMessage) (limit.Result, error) {
	t, err := now.AsInt64()
	if err != nil {
		return limit.Result{}, unavailable("decide", err)
	}
	res := limit.Result{
		Allowed:   true,
		Decisions: core.Decisions(req, len(req.Limits)),
		Time:      time.UnixMicro(t),
	}
	for i, l := range req.Limits {
		d, err := decision(l, v[3*i:3*i+3])
		if err != nil {
			return limit.Result{}, err
		}
		add(&res, i, d)
	}
	return res, nil
}

// add sets res's decision i to d and folds it into res: the longest delay
// of the limits that admit, and a rejection by any that is not shadow.
func add(res *limit.Result, i int, d limit.Decision) {
	res.Decisions[i] = d
	if d.Allowed {
		res.Delay = max(res.Delay, d.Delay)
	} else {
		res.Allowed = res.Allowed && d.Rule.Shadow
	}
}

// decision is l's answer from the script's three numbers: the remaining
// count, the reset, and the delay of a limit that admits the request or
// -1 - retry after of one that rejects it, all in µs.
func decision(l limit.Limit, v []rueidis.RedisMessage) (limit.Decision, error) {
	var n [3]int64
	for i := range n {
		x, err := v[i].AsInt64()
		if err != nil {
			return limit.Decision{}, unavailable("decide", err)
		}
		n[i] = x
	}
	d := limit.Decision{
		Rule:       l.Rule,
		Key:        l.Key,
		Allowed:    n[2] >= 0,
		Limit:      argsOf(l.Rule).n,
		Remaining:  n[0],
		ResetAfter: us(n[1]),
	}
	if d.Allowed {
		d.Delay = us(n[2])
	} else {
		d.RetryAfter = us(-1 - n[2])
	}
	return d, nil
}

// DecideCommand returns the command that Decide sends Redis for req:
// EVALSHA, the script's SHA-1, the number of keys, the keys and the
// arguments, of req's limits once those on one counter are merged
// (core.Merge). It loads the script into the store's Redis first, so that
// the command can be replayed there as it is (redis-cli, redis-benchmark)
// to measure or debug the script with exactly the store's arguments.
func (s *Store) DecideCommand(ctx context.Context, req *limit.Request) ([]string, error) {
	req, err := core.Merge(req)
	if err != nil {
		return nil, err
	}
	if s.mode == Cluster {
		if n := len(s.groups(req)); n > 1 {
			return nil, fmt.Errorf("redisstore: the limits' keys are in %d slots, which a cluster decides by several commands", n)
		}
	}
	c, err := s.get("decide")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sha, err := c.Do(ctx, c.B().ScriptLoad().Script(decideSource).Build()).ToString()
	if err != nil {
		return nil, unavailable("decide", err)
	}
	var sc scriptCall
	s.decideCall(&sc, req)
	cmd := append([]string{"EVALSHA", sha, strconv.Itoa(len(sc.keys))}, sc.keys...)
	return append(cmd, sc.args...), nil
}

// Peek implements limit.Store. It runs decide.lua in its read mode, which
// removes expired entries and writes nothing else.
func (s *Store) Peek(ctx context.Context, now time.Time, r *limit.Rule, k limit.Key) (limit.State, error) {
	if now.IsZero() {
		now = time.Now()
	}
	if err := r.Validate(); err != nil {
		return limit.State{}, err
	}
	c, err := s.get("peek")
	if err != nil {
		return limit.State{}, err
	}
	key := core.StoredKey(s.prefix, r, k)
	g, ok, probe := s.enterKey(key)
	if !ok {
		return limit.State{}, resting("peek", g)
	}
	a := argsOf(r)
	args, _ := a.appendTo(append(make([]string, 0, base+11), "p", s.offsetArg(), "", ""), r, 1, now)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := decideScript.Exec(ctx, c, []string{key}, args).AsIntSlice()
	switch {
	case err != nil:
		err = unavailable("peek", err)
	case len(v) != 4:
		err = unavailable("peek", fmt.Errorf("script returned %d values", len(v)))
	}
	s.leaveKey(g, key, probe, err)
	if err != nil {
		return limit.State{}, err
	}
	return limit.State{
		Algorithm:  r.Algorithm,
		Limit:      a.n,
		Window:     r.Window(),
		Remaining:  v[1],
		ResetAfter: us(v[2]),
		InFlight:   v[3],
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
	err = c.Do(ctx, c.B().Del().Key(core.StoredKey(s.prefix, r, k)).Build()).Error()
	if s.local != nil {
		// After the DEL: an answer read before it is dropped (Forget), and
		// one read after it says what the reset key holds.
		s.local.Forget(r.Name, k)
	}
	if r.Sliced {
		// What this instance held of the old count is gone with it.
		s.dropSlice(limit.Limit{Rule: r, Key: k})
	}
	if err == nil {
		// And what the other instances remember of it.
		s.publishForget(ctx, c, limit.Limit{Rule: r, Key: k})
	}
	return unavailable("reset", err)
}

func us(v int64) time.Duration {
	if v > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Microsecond
}
