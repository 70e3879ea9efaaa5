package admin

// The dashboard's charts of a protected route (protect:): the limit its
// protection learned, and what this instance admits now, against the
// requests that reached the upstream and those protection turned away,
// per second; read from the gatherer as every other series is
// (gateway_protect_limit, gateway_protect_admitting,
// gateway_protect_refused_total). A route without protect has no such
// ring and its answer no such field, so a config without protection
// costs and reads as before.

// protectPoint is a protected route's interval, in requests/s.
type protectPoint struct {
	// Limit is the limit learned at the interval's end (the fleet's, with
	// the Redis store); protect.Unbounded (1e9) while a route without max
	// has not met overload yet.
	Limit float32
	// Admitting is what this instance admitted at the interval's end:
	// the limit, or less during a warm-up; with the Redis store, its
	// share of the fleet's limit.
	Admitting float32
	// Forwarded are the requests that reached the upstream: the route's
	// answers but those its limits, its breaker and its protection gave.
	Forwarded float32
	Refused   float32 // turned away by protection
}

// takeProtect puts route's protection of the interval from prev to s at
// i, p being the route's point; it drops the ring of a route that has no
// protection any more.
func (rr *routeRing) takeProtect(s, prev *sample, route string, p *routePoint, secs float64, i int) {
	limit, ok := s.protLimit[route]
	if !ok {
		rr.protect = nil
		return
	}
	if rr.protect == nil {
		rr.protect = make([]protectPoint, historyLen)
		for j := range rr.protect {
			rr.protect[j] = protectPoint{Limit: nan32, Admitting: nan32, Forwarded: nan32, Refused: nan32}
		}
	}
	pp := protectPoint{Limit: float32(limit), Admitting: nan32, Refused: diff(s.protRefused[route], prev.protRefused[route], secs)}
	if a, ok := s.protAdmitting[route]; ok {
		pp.Admitting = float32(a)
	}
	// A limit's rejection, the breaker's fallback and protection's
	// refusal are each counted once, beside the answer's status: what is
	// left of the answers went upstream. The gateway's rarer answers of
	// its own (413, a missing key, a failed store under on_error: deny)
	// count as forwarded.
	var limited float32
	for lim, n := range s.rejected[route] {
		limited += diff(n, prev.rejected[route][lim], secs)
	}
	pp.Forwarded = max(p.total()-limited-p.Breaker-pp.Refused, 0)
	rr.protect[i] = pp
}

// protectJSON is a protected route's history, one array per line,
// aligned with the answer's times.
type protectJSON struct {
	Limit     series `json:"limit"` // 1e+09: none learned yet
	Admitting series `json:"admitting"`
	Forwarded series `json:"forwarded"`
	Refused   series `json:"refused"`
}

// protectSeries is the ring's points at idx; nil for a route without
// protection.
func (rr *routeRing) protectSeries(idx []int) *protectJSON {
	if rr.protect == nil {
		return nil
	}
	out := &protectJSON{
		Limit: make(series, len(idx)), Admitting: make(series, len(idx)),
		Forwarded: make(series, len(idx)), Refused: make(series, len(idx)),
	}
	for k, i := range idx {
		p := rr.protect[i]
		out.Limit[k], out.Admitting[k], out.Forwarded[k], out.Refused[k] = jf(p.Limit), jf(p.Admitting), jf(p.Forwarded), jf(p.Refused)
	}
	return out
}

// appendJSON writes p as encoding/json would.
func (p *protectJSON) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = field(b, "limit", p.Limit, false)
	b = field(b, "admitting", p.Admitting, true)
	b = field(b, "forwarded", p.Forwarded, true)
	b = field(b, "refused", p.Refused, true)
	return append(b, '}')
}

// protectView is a protected route's protection now, as GET /admin/protect
// gives it, without the fields the page does not draw: the page is open
// to whoever reaches the listener.
type protectView struct {
	Limit     float64 `json:"limit"` // 1e9: none learned yet
	Admitting float64 `json:"admitting"`
	Baseline  float64 `json:"baseline"` // seconds; 0: not learned yet
	Min       float64 `json:"min"`
	Max       float64 `json:"max,omitempty"`
	// Instances share the limit with the Redis store, this one included;
	// 0 while it protects alone. Admitting is then this one's share.
	Instances int `json:"instances,omitempty"`
}

// protection puts in each protected route's protection now.
func (db *dashboardBuild) protection() {
	pv, ok := db.h.b.(ProtectViewer)
	if !ok || db.h.b.Config() == nil {
		return
	}
	for _, p := range pv.Protected() {
		db.route(p.Route).Protect = &protectView{Limit: p.Limit, Admitting: p.Admitting, Baseline: p.Baseline,
			Min: p.Min, Max: p.Max, Instances: p.Instances}
	}
}
