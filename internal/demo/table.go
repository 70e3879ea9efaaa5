package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// A demoRow is one second of the demo's table: what the load generator
// measured of the attempts sent in it, and what the gateway and the
// coupon API counted in it.
type demoRow struct {
	rehearse.Second
	newUsers int64         // users whose first attempt was in this second
	limited  []int64       // 429s by limit, in the order of the table's columns
	reached  int64         // requests that reached the coupon API
	protect  protectSecond // protection's limit, and what it turned away
	breaker  string        // the states the breaker entered, or the one it was in
}

// demoTable prints the rows in columns that fit in 100 characters, the
// breaker's states included.
type demoTable struct {
	out       io.Writer
	limits    []string
	widths    []int
	protected bool // the route has protection: a column for its limit
}

func newDemoTable(out io.Writer, limits []*config.Limit, protected bool) *demoTable {
	t := &demoTable{out: out, protected: protected}
	for _, l := range limits {
		t.limits = append(t.limits, l.Name)
		t.widths = append(t.widths, max(len(l.Name), 4))
	}
	return t
}

func (t *demoTable) header() {
	unavailable, learned := "the open breaker's, or the failing API's own", ""
	if t.protected {
		unavailable = "the open breaker's, the failing API's own, or protection's: overloaded"
		learned = " the limit protection learned (requests a second it admits to the API),"
	}
	fmt.Fprintf(t.out, "%s\n\n", wrap("each second: sent (requests, retries included), new (users making their first attempt), "+
		"admitted (answered 2xx), 429 by the limit that refused (as the gateway counted them), 503 ("+unavailable+
		"), other answers (504: the API took longer than the route's timeout), their latency (p50, p99), "+
		"requests that reached the coupon API (API),"+learned+" the breaker's state", ""))
	span := len(t.limits) - 1
	for _, w := range t.widths {
		span += w
	}
	fmt.Fprintf(t.out, "%3s %6s %5s %8s  %-*s\n", "", "", "", "", span, center("429 by limit", span, '-'))
	fmt.Fprintf(t.out, "%3s %6s %5s %8s ", "t", "sent", "new", "admitted")
	for i, name := range t.limits {
		fmt.Fprintf(t.out, " %*s", t.widths[i], name)
	}
	fmt.Fprintf(t.out, " %5s %5s %5s %5s %4s", "503", "other", "p50", "p99", "API")
	if t.protected {
		fmt.Fprintf(t.out, " %5s", "limit")
	}
	fmt.Fprintf(t.out, " %s\n", "breaker")
}

func (t *demoTable) row(r demoRow) {
	fmt.Fprintf(t.out, "%3d %6d %5d %8d ", r.T, r.Sent, r.newUsers, r.OK)
	for i, n := range r.limited {
		fmt.Fprintf(t.out, " %*d", t.widths[i], n)
	}
	fmt.Fprintf(t.out, " %5d %5d %5s %5s %4d", r.Unavailable, r.Other, ms(r.P50), ms(r.P99), r.reached)
	if t.protected {
		fmt.Fprintf(t.out, " %5s", rps(r.protect.limit))
	}
	fmt.Fprintf(t.out, " %s\n", r.breaker)
}

// rps formats a rate in requests a second in at most 5 columns: "-" for
// none (a limit not learned yet, or no limit at all).
func rps(v float64) string {
	if v < 0 || v >= 1e5 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// maxWidth is how wide the demo's lines get, its table's rows included.
const maxWidth = 100

// wrap breaks s into lines of maxWidth at most, at spaces, each line but
// the first starting with indent. A word longer than a line (a path)
// stays whole.
func wrap(s, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(w) > maxWidth:
			b.WriteString("\n" + indent)
			n = len(indent)
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// center puts s in the middle of width characters of fill, with a space
// each side.
func center(s string, width int, fill byte) string {
	pad := width - len(s) - 2
	if pad < 0 {
		return s
	}
	return strings.Repeat(string(fill), pad/2) + " " + s + " " + strings.Repeat(string(fill), pad-pad/2)
}

// gatewayCounts are the counters of the gateway that the demo reads from
// its metrics, for one route.
type gatewayCounts struct {
	limited     map[string]float64    // gateway_rate_limited_total, by limit
	transitions map[[2]string]float64 // gateway_circuit_breaker_transitions_total, by from and to
	jwtFailures float64               // gateway_jwt_failures_total
	storeErrors float64               // gateway_ratelimit_store_errors_total
	// recorded and recordedOverloaded are gateway_events_total of the
	// events recorded: breaker_rejected (the open breaker's) and
	// overloaded (protection's).
	recorded, recordedOverloaded float64
	// protectLimit is gateway_protect_limit, the limit protection learned
	// (-1: the route has no protection); overloaded is
	// gateway_protect_refused_total, the requests it turned away.
	protectLimit float64
	overloaded   float64
}

func readCounts(g prometheus.Gatherer, route string) gatewayCounts {
	c := gatewayCounts{limited: map[string]float64{}, transitions: map[[2]string]float64{}, protectLimit: -1}
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "gateway_rate_limited_total":
				if l["route"] == route {
					c.limited[l["limit"]] += v
				}
			case "gateway_circuit_breaker_transitions_total":
				if l["route"] == route {
					c.transitions[[2]string{l["from"], l["to"]}] += v
				}
			case "gateway_events_total":
				switch {
				case l["result"] != "recorded":
				case l["type"] == events.TypeBreakerRejected:
					c.recorded += v
				case l["type"] == events.TypeOverloaded:
					c.recordedOverloaded += v
				}
			case "gateway_jwt_failures_total":
				c.jwtFailures += v
			case "gateway_ratelimit_store_errors_total":
				c.storeErrors += v
			case "gateway_protect_limit":
				if l["route"] == route {
					c.protectLimit = m.GetGauge().GetValue()
				}
			case "gateway_protect_refused_total":
				if l["route"] == route {
					c.overloaded += v
				}
			}
		}
	}
	return c
}

func labelMap(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// A breakerWatch samples the gateway's counters for one route and files
// what changed by the second it saw it in: the 429s of each limit, the
// breaker's transitions, protection's limit and what it turned away. The
// counters, unlike a look at the breaker's state now and then, miss no
// transition, however short the state.
type breakerWatch struct {
	reg    prometheus.Gatherer
	route  string
	start  time.Time
	opened chan struct{} // closed when the breaker is first seen OPEN

	mu      sync.Mutex
	last    gatewayCounts
	state   string // after the last transition seen
	changes []stateChange
	secs    map[int]map[string]int64 // second -> limit -> 429s
	// protect is, by second, protection's limit at the second's last
	// sample and the requests it turned away in it.
	protect map[int]protectSecond
}

// protectSecond is what protection did in a second.
type protectSecond struct {
	limit      float64 // the limit learned, at the second's last sample
	overloaded int64   // the requests turned away
}

type stateChange struct {
	at    time.Duration // since start, to the sample that saw it
	state string
}

func newBreakerWatch(reg prometheus.Gatherer, route string, start time.Time, bs []gateway.BreakerStatus) *breakerWatch {
	w := &breakerWatch{reg: reg, route: route, start: start, opened: make(chan struct{}), secs: map[int]map[string]int64{},
		protect: map[int]protectSecond{}, state: "-"}
	for _, b := range bs {
		if b.Route == route {
			w.state = b.State
		}
	}
	w.changes = []stateChange{{0, w.state}}
	w.last = readCounts(reg, route)
	return w
}

// run samples every period until ctx ends.
func (w *breakerWatch) run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.sample(now)
		}
	}
}

// sample reads the counters at now and files what changed since the last
// sample under now's second.
func (w *breakerWatch) sample(now time.Time) {
	c := readCounts(w.reg, w.route)
	w.mu.Lock()
	defer w.mu.Unlock()
	at := now.Sub(w.start)
	s := int(at / time.Second)
	for name, v := range c.limited {
		if d := int64(v - w.last.limited[name]); d > 0 {
			if w.secs[s] == nil {
				w.secs[s] = map[string]int64{}
			}
			w.secs[s][name] += d
		}
	}
	if c.protectLimit >= 0 {
		p := w.protect[s]
		p.limit = c.protectLimit
		p.overloaded += int64(c.overloaded - w.last.overloaded)
		w.protect[s] = p
	}
	// The transitions since the last sample, put in the order the
	// breaker took them: from the state it was in, each one leaves the
	// state the one before entered.
	left := map[[2]string]int{}
	var keys [][2]string
	for k, v := range c.transitions {
		if d := int(v - w.last.transitions[k]); d > 0 {
			left[k] = d
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	for len(left) > 0 {
		next := [2]string{}
		for _, k := range keys {
			if left[k] > 0 && (k[0] == w.state || next == [2]string{}) {
				next = k
				if k[0] == w.state {
					break
				}
			}
		}
		if left[next]--; left[next] == 0 {
			delete(left, next)
		}
		w.state = next[1]
		w.changes = append(w.changes, stateChange{at, w.state})
		if w.state == "OPEN" {
			select {
			case <-w.opened:
			default:
				close(w.opened)
			}
		}
	}
	w.last = c
}

// current is the state the breaker took last, as far as the samples
// tell.
func (w *breakerWatch) current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// limited returns the 429s of each limit filed under second s.
func (w *breakerWatch) limited(s int, limits []*config.Limit) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, len(limits))
	for i, l := range limits {
		out[i] = w.secs[s][l.Name]
	}
	return out
}

// protectionIn returns what protection did in second s; its limit is the
// one of the last second sampled before when s has none, and -1 for a
// route without protection.
func (w *breakerWatch) protectionIn(s int) protectSecond {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.protect[s]
	for t := s - 1; !ok && t >= 0; t-- {
		p, ok = w.protect[t]
		p.overloaded = 0
	}
	if !ok {
		p.limit = -1
	}
	return p
}

// breakerIn says the states the breaker entered in second s, in order, or
// the state it was in when it entered none. More than fit the table's last
// column (a busy machine's trials fail fast) end in the last one:
// "..>OPEN".
func (w *breakerWatch) breakerIn(s int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	state := w.changes[0].state
	var entered []string
	for _, c := range w.changes[1:] {
		switch sec := int(c.at / time.Second); {
		case sec < s:
			state = c.state
		case sec == s:
			entered = append(entered, c.state)
		}
	}
	if len(entered) > 0 {
		if s := strings.Join(entered, ">"); len(s) <= maxBreakerCell {
			return s
		}
		return "..>" + entered[len(entered)-1]
	}
	return state
}

// maxBreakerCell is the widest the table's breaker column gets, which
// keeps a row within 100 columns: "HALF_OPEN>CLOSED".
const maxBreakerCell = 16

// wasSince reports whether the breaker was in state at any time from
// since (since the start) on, the state it was in then included.
func (w *breakerWatch) wasSince(since time.Duration, state string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range w.changes {
		if c.state == state && (c.at >= since || i+1 == len(w.changes) || w.changes[i+1].at > since) {
			return true
		}
	}
	return false
}

// states returns the breaker's states in the order it took them.
func (w *breakerWatch) states() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, len(w.changes))
	for i, c := range w.changes {
		out[i] = c.state
	}
	return out
}

// changeLog says when the breaker took each state: "CLOSED, OPEN at 10.4s, ...".
func (w *breakerWatch) changeLog() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []string{w.changes[0].state}
	for _, c := range w.changes[1:] {
		out = append(out, fmt.Sprintf("%s at %.1fs", c.state, c.at.Seconds()))
	}
	return out
}
