package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Limits: keys, rates, algorithms, sync and overrides, and the rules built
// from them.

// uniqueName checks a limit's name and that it is not taken, by the other
// limits of its list (own) or by a global limit (global).
// It reports whether the name is valid.
func (v *validator) uniqueName(l *Limit, p string, own, global map[string]string) bool {
	np := p + ".name"
	switch {
	case v.failed(np):
		return false
	case !v.has(np) || l.Name == "":
		v.errorf(p, "a limit needs a name")
	case !nameRE.MatchString(l.Name):
		v.errorf(np, "%q: a limit name is made of a-z, 0-9, _ and -", l.Name)
	default:
		if first, ok := own[l.Name]; ok {
			v.errorf(np, "duplicate limit name %q (first at line %d)", l.Name, v.line(first))
		} else if first, ok := global[l.Name]; ok {
			v.errorf(np, "limit name %q is taken by a global limit (line %d); a route's limits and the global limits are decided together", l.Name, v.line(first))
		} else {
			own[l.Name] = np
		}
		return true
	}
	return false
}

// keyParts checks a key or fallback list for a part given twice. Header
// names are compared without case, as requests carry them; a part that did
// not decode has its own error and is not compared.
func (v *validator) keyParts(p string, parts []KeyPart) {
	seen := map[KeyPart]int{}
	for i, k := range parts {
		at := fmt.Sprintf("%s[%d]", p, i)
		if v.failed(at) {
			continue
		}
		same := k
		if k.Source == SourceHeader {
			same.Name = strings.ToLower(k.Name)
		}
		if j, dup := seen[same]; dup {
			v.errorf(at, "%s is already part %d of the key", k, j+1)
			continue
		}
		seen[same] = i
	}
}

// rate reads the rate of a limit or override from whichever form the file
// used; ok is false after an error.
//
// The long form is folded into Rate: the rest of floodgate reads one field.
func (v *validator) rate(p string, alg limit.Algorithm, r *limit.Rate, lim *int64, win *time.Duration) (ok bool) {
	n, w := *lim, *win
	hasRate, hasLimit, hasWindow := v.has(p+".rate"), v.has(p+".limit"), v.has(p+".window")
	if v.failed(p+".rate") || v.failed(p+".limit") || v.failed(p+".window") {
		return false
	}
	if alg == limit.Concurrency {
		switch {
		case hasRate:
			v.errorf(p+".rate", "concurrency takes limit: N (requests in flight) alone, not a rate")
		case hasWindow:
			v.errorf(p+".window", "concurrency takes limit: N (requests in flight) alone, not a window")
		case !hasLimit:
			v.errorf(p, "concurrency needs limit: N, the requests in flight")
		case n <= 0:
			v.errorf(p+".limit", "%d must be positive", n)
		default:
			*r = limit.Rate{Count: n}
			return true
		}
		return false
	}
	switch {
	case hasRate && hasLimit:
		v.errorf(p+".limit", "give rate, or limit with window, not both")
	case hasRate && hasWindow:
		v.errorf(p+".window", "give rate, or limit with window, not both")
	case hasRate:
		return true
	case hasLimit && !hasWindow:
		v.errorf(p+".limit", "limit needs a window (or write rate: N/UNIT)")
	case hasWindow && !hasLimit:
		v.errorf(p+".window", "window needs a limit (or write rate: N/UNIT)")
	case !hasLimit:
		v.errorf(p, "a limit needs a rate (rate: 100/s) or limit and window")
	case n <= 0:
		v.errorf(p+".limit", "%d must be positive", n)
	case w <= 0:
		v.errorf(p+".window", "%v must be positive", w)
	default:
		*r = limit.Rate{Count: n, Period: w}
		*lim, *win = 0, 0
		return true
	}
	return false
}

// longestQueue is the longest queue of the limits: how long a request may
// wait for a token after it is admitted, holding its leases.
func longestQueue(lists ...[]*Limit) time.Duration {
	var q time.Duration
	for _, ls := range lists {
		for _, l := range ls {
			if l != nil {
				q = max(q, l.Queue)
			}
		}
	}
	return q
}

// limit checks one limit and builds its rule and its overrides' rules.
//
// Its rule is built only when the fields the rule is made of are sound, so
// that Rule.Validate reports what the config checks cannot (a burst below
// the cost, a sliding count above its maximum) and not the echo of an error
// already reported; build is false when the rule's name would be invalid.
func (v *validator) limit(l *Limit, p, ruleName string, lease time.Duration, build bool) {
	if len(l.Key) == 0 && !v.failed(p+".key") {
		v.errorf(p, "a limit needs a key, such as [ip], [route] or [header:X-User-Id]")
	}
	v.keyParts(p+".key", l.Key)
	v.keyParts(p+".fallback", l.Fallback)
	switch l.OnMissing {
	case OnMissingDeny, OnMissingAllow:
	default:
		v.errorf(p+".on_missing", "unknown on_missing %q (deny, allow)", l.OnMissing)
	}
	v.onError(p+".on_error", l.OnError, true)

	before := len(v.errs)
	alg := l.Algorithm
	if v.has(p+".align") && alg != limit.FixedWindow {
		v.errorf(p+".align", "align applies to fixed_window only (algorithm is %v)", alg)
	}
	if v.has(p+".tz") && (alg != limit.FixedWindow || l.Align != limit.AlignEpoch) {
		v.errorf(p+".tz", "tz applies to fixed_window with align epoch only")
	}
	if v.has(p+".queue") && alg != limit.TokenBucket {
		v.errorf(p+".queue", "queue applies to token_bucket only (algorithm is %v)", alg)
	} else if l.Queue < 0 {
		v.errorf(p+".queue", "%v is negative", l.Queue)
	}
	if v.has(p + ".cost") {
		if alg == limit.Concurrency {
			v.errorf(p+".cost", "concurrency has no cost: a request holds one lease")
		} else if l.Cost <= 0 && !v.failed(p+".cost") {
			v.errorf(p+".cost", "%d must be positive", l.Cost)
		}
	}
	sliced := v.sync(l, p)
	rateOK := v.rate(p, alg, &l.Rate, &l.Limit, &l.Window)
	l.Burst = v.burst(p, alg, l.Burst, l.Rate, rateOK)
	ruleOK := len(v.errs) == before && !v.failedAny(p, "algorithm", "align", "tz", "queue", "cost", "rate", "limit", "window", "burst")

	rp := p + ".reject"
	if l.Reject.Status < 400 || l.Reject.Status > 599 {
		v.errorf(rp+".status", "%d is outside 400..599", l.Reject.Status)
	}
	v.code(rp+".code", l.Reject.Code)

	overrideOK := make([]bool, len(l.Overrides))
	for i, o := range l.Overrides {
		overrideOK[i] = v.override(l, o, fmt.Sprintf("%s.overrides[%d]", p, i))
	}
	if !ruleOK {
		return
	}
	if !build {
		// The rule's real name is invalid, and that is reported; a stand-in
		// still lets Rule.Validate report the rest.
		ruleName = "invalid"
	}
	rule := &limit.Rule{
		Name:      ruleName,
		Algorithm: alg,
		Rate:      l.Rate,
		Burst:     l.Burst,
		Cost:      l.Cost,
		Queue:     l.Queue,
		Align:     l.Align,
		Location:  l.TZ,
		Shadow:    l.Shadow,
		Sliced:    sliced,
	}
	if alg == limit.Concurrency {
		l.Cost, rule.Cost = 0, 0 // a request holds one lease
		rule.LeaseTTL = lease
	}
	if !v.rule(p, rule) {
		return
	}
	for i, o := range l.Overrides {
		if !overrideOK[i] {
			continue
		}
		// An override is the limit with another rate: the same algorithm,
		// cost, queue and windows, but counters of its own.
		or := &limit.Rule{
			Name:      ruleName + "#o" + strconv.Itoa(i+1),
			Algorithm: alg,
			Rate:      o.Rate,
			Burst:     o.Burst,
			Cost:      rule.Cost,
			Queue:     rule.Queue,
			Align:     rule.Align,
			Location:  rule.Location,
			Shadow:    rule.Shadow,
			LeaseTTL:  rule.LeaseTTL,
			Sliced:    rule.Sliced,
		}
		if v.rule(fmt.Sprintf("%s.overrides[%d]", p, i), or) && build {
			o.Rule = or
		}
	}
	if build {
		l.Rule = rule
	}
}

// sync checks a limit's sync and reports whether its rule is sliced.
// Slices are of a fixed window's count, leased to instances that share
// one key: for a key of a user or an IP every instance would hold a slice
// of each, and lose what it holds when the window ends.
func (v *validator) sync(l *Limit, p string) bool {
	sp := p + ".sync"
	switch l.Sync {
	case SyncExact:
		return false
	case SyncLease:
	default:
		v.errorf(sp, "unknown sync %q (exact, lease)", l.Sync)
		return false
	}
	ok := true
	if l.Algorithm != limit.FixedWindow {
		v.errorf(sp, "lease takes slices of a fixed window; a %v cannot be leased", l.Algorithm)
		ok = false
	}
	for _, parts := range [][]KeyPart{l.Key, l.Fallback} {
		for _, k := range parts {
			if k.Source != SourceGlobal && k.Source != SourceRoute {
				v.errorf(sp, "lease is for keys every request shares (global, route); key part %s differs from request to request", k)
				return false
			}
		}
	}
	if ok && v.storeType != StoreRedis {
		v.warnf(sp, "lease has nothing to lease from with the %s store, which decides in this process: the limit is exact", v.storeType)
	}
	return ok
}

// rule validates a built rule, reporting its problem at the line of the
// limit or override at p. The message drops the rule's name: the path
// already says which limit it is.
func (v *validator) rule(p string, r *limit.Rule) bool {
	err := r.Validate()
	if err == nil {
		return true
	}
	v.errorf(p, "%s", strings.TrimPrefix(err.Error(), "rule "+r.Name+": "))
	return false
}

// burst checks a written burst, or returns the default: the count of the
// rate as written, so 100/s has burst 100 and 6000/min burst 6000.
func (v *validator) burst(p string, alg limit.Algorithm, burst int64, r limit.Rate, rateOK bool) int64 {
	bp := p + ".burst"
	switch {
	case !v.has(bp):
		if alg == limit.TokenBucket && rateOK {
			return r.Count
		}
	case alg != limit.TokenBucket:
		v.errorf(bp, "burst applies to token_bucket only (algorithm is %v)", alg)
	case burst <= 0 && !v.failed(bp):
		v.errorf(bp, "%d must be positive", burst)
	}
	return burst
}

// override checks an override; ok reports whether its rule can be built.
func (v *validator) override(l *Limit, o *Override, p string) (ok bool) {
	hasValues, hasHeader, hasClaim := v.has(p+".values"), v.has(p+".header"), v.has(p+".claim")
	switch {
	case hasValues && hasHeader:
		v.errorf(p+".header", "an override matches by values or by header, not both")
	case hasClaim && (hasValues || hasHeader):
		v.errorf(p+".claim", "an override matches by one of values, header and claim, not several")
	case !hasValues && !hasHeader && !hasClaim:
		v.errorf(p, "an override needs values, header or claim to match requests by")
	case hasClaim:
		v.claimMatch(o.Claim, p+".claim")
	case hasValues:
		if len(o.Values) == 0 && !v.failed(p+".values") {
			v.errorf(p+".values", "empty: the override would match nothing")
		}
		for i, kv := range o.Values {
			vp := fmt.Sprintf("%s.values[%d]", p, i)
			if len(l.Key) > 0 && len(kv) != len(l.Key) && !v.failed(vp) {
				v.errorf(vp, "%d values for a key of %d parts %v", len(kv), len(l.Key), l.Key)
			}
		}
	case o.Header != nil && !v.failed(p+".header"):
		if !isToken(o.Header.Name) {
			v.errorf(p+".header.name", "%q is not a valid header name", o.Header.Name)
		}
		if o.Header.Value == "" {
			v.errorf(p+".header.value", "empty: give the header value to match")
		}
	}
	before := len(v.errs)
	rateOK := v.rate(p, l.Algorithm, &o.Rate, &o.Limit, &o.Window)
	o.Burst = v.burst(p, l.Algorithm, o.Burst, o.Rate, rateOK)
	return len(v.errs) == before && !v.failedAny(p, "rate", "limit", "window", "burst")
}
