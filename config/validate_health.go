package config

import "strings"

// A route's balancing and the health of its targets: active checks
// (upstream.health) and ejection after failed exchanges (upstream.eject).

func (v *validator) balance(u *Upstream, p string) {
	bp := p + ".balance"
	switch u.Balance {
	case BalanceRoundRobin, BalanceLeastRequest:
	default:
		if !v.failed(bp) {
			v.errorf(bp, "unknown balance %q (round_robin, least_request)", u.Balance)
		}
	}
}

func (v *validator) health(h *Health, proto Protocol, p string) {
	hp := p + ".health"
	if v.failed(hp) {
		return
	}
	gp := hp + ".grpc_service"
	grpc := h.GRPCService != nil
	if grpc {
		if proto != ProtocolH2C && proto != ProtocolH2 && !v.failed(p+".protocol") {
			v.errorf(gp, "a gRPC check needs upstream.protocol h2c or h2, not %s", proto)
		}
		if h.Path != "" {
			v.errorf(lineKey(v, hp+".path", gp), "give path (a GET) or grpc_service (a gRPC check), not both")
		}
	}
	switch {
	case h.Interval < 0:
		v.errorf(hp+".interval", "%v: want 0 (no active checks) or a positive duration such as 5s", h.Interval)
		return
	case h.Interval == 0:
		if h.Path != "" {
			v.warnf(hp+".path", "no check is made: health.interval is 0s (set it, 5s say, to check %s)", h.Path)
		}
		return
	}
	pp := hp + ".path"
	switch {
	case grpc:
	case h.Path != "" && (proto == ProtocolH2C || proto == ProtocolH2):
		v.warnf(pp, "the check is an HTTP GET, which a gRPC server answers 415: for gRPC targets give grpc_service instead (\"\": the server's own health)")
	}
	switch {
	case grpc:
	case h.Path == "":
		v.errorf(lineKey(v, pp, hp), "active checks (health.interval %v) need the path to ask for, such as /healthz", h.Interval)
	case !strings.HasPrefix(h.Path, "/"):
		v.errorf(pp, "%q does not start with /", h.Path)
	case strings.ContainsAny(h.Path, "# \t\r\n"):
		v.errorf(pp, "%q: a check's path has no fragment or white space", h.Path)
	}
	tp := hp + ".timeout"
	if !v.has(tp) {
		// Not given: 1s, or half the interval when that is shorter, so
		// that a short interval needs no timeout of its own.
		h.Timeout = min(h.Timeout, h.Interval/2)
	}
	switch {
	case h.Timeout <= 0:
		v.errorf(tp, "%v must be positive", h.Timeout)
	case h.Timeout >= h.Interval:
		v.errorf(lineKey(v, tp, hp+".interval"), "timeout %v must be below interval %v: a check must end before the next begins", h.Timeout, h.Interval)
	}
	v.atLeastOne(hp+".healthy_after", h.HealthyAfter)
	v.atLeastOne(hp+".unhealthy_after", h.UnhealthyAfter)
}

func (v *validator) eject(e *Eject, p string) {
	ep := p + ".eject"
	if v.failed(ep) {
		return
	}
	for _, c := range []struct {
		key string
		n   int
	}{{"consecutive_failures", e.ConsecutiveFailures}, {"consecutive_5xx", e.Consecutive5xx}} {
		if c.n < 0 {
			v.errorf(ep+"."+c.key, "%d: want 0 (never) or a count of 1 or more", c.n)
		}
	}
	if e.ConsecutiveFailures == 0 && e.Consecutive5xx == 0 {
		return
	}
	v.positive(ep+".base_time", e.BaseTime)
	switch mp := ep + ".max_time"; {
	case v.failed(mp), e.BaseTime <= 0:
	case e.MaxTime < e.BaseTime:
		v.errorf(lineKey(v, mp, ep+".base_time"), "max_time %v is below base_time %v", e.MaxTime, e.BaseTime)
	}
}

// atLeastOne reports a count below 1.
func (v *validator) atLeastOne(p string, n int) {
	if n < 1 && !v.failed(p) {
		v.errorf(p, "%d: want 1 or more", n)
	}
}

// lineKey is p when the file gives it, else other: the key an error
// about a pair of values is reported at.
func lineKey(v *validator, p, other string) string {
	if v.has(p) {
		return p
	}
	return other
}
