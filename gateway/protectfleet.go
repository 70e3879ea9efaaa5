package gateway

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/protect"
)

// With the Redis store, the instances that protect a route hold one limit
// between them (package protect, fleet.go): every interval each sends its
// gate's report through the fleet bus and reads the others' in the same
// call, one round trip per route and instance whatever the traffic. When
// Redis does not answer, the route's protection decides on this
// instance's own (its share of the fleet's limit becoming its own limit)
// until a report gets through again, and says so: a WARN line, the
// gateway_protect_fleet_fallback gauge and /readyz's detail.

// protectTTL is how long an instance's report counts: one that has not
// reported for three intervals is gone, and the others take its share.
const protectTTL = 3 * protect.DefaultInterval

// protectCallWait bounds a report's round trip: the tick of every route
// waits for it.
const protectCallWait = protect.DefaultInterval / 2

// fleetProtect is a route's protection's link to the fleet.
type fleetProtect struct {
	alone alone       // deciding alone; gateway_protect_fleet_fallback
	bad   atomic.Bool // a report that could not be read was logged
}

// enterFleet joins the fleet's limit as a new protector starts, before it
// admits anything: it reads the others' reports, and starts within what
// they leave.
func (g *Gateway) enterFleet(bus *fleetbus.Bus, route string, rp *routeProtect) {
	ctx, cancel := context.WithTimeout(context.Background(), protectCallWait)
	defer cancel()
	prs, err := bus.ProtectRead(ctx, route, g.ids.Prefix(), protectTTL)
	if err != nil {
		g.protectAlone(route, rp, err)
		return
	}
	rp.p.Enter(time.Now(), g.peers(route, rp, prs))
}

// protectRead is how long after the interval's end an instance reads the
// fleet's reports: time for every instance to have written its own, with
// the clocks a few milliseconds apart and Redis a round trip away.
const protectRead = 100 * time.Millisecond

// sendReport writes this instance's report of route's interval.
func (g *Gateway) sendReport(bus *fleetbus.Bus, route string, own protect.Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), protectCallWait)
	defer cancel()
	_, err := bus.ProtectReport(ctx, route, g.ids.Prefix(), own.Encode(), protectTTL)
	return err
}

// joinFleet moves route's limit with the fleet's reports of the interval
// that ended at end, or alone when they are out of reach (sent: what
// writing its own report said).
func (g *Gateway) joinFleet(bus *fleetbus.Bus, route string, rp *routeProtect, end time.Time, own protect.Report, sent error) protect.Step {
	err := sent
	var got []fleetbus.PeerReport
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), protectCallWait)
		got, err = bus.ProtectRead(ctx, route, g.ids.Prefix(), protectTTL)
		cancel()
	}
	if err != nil {
		// Alone first, then said: what /readyz and the gauge say holds
		// by the time they say it.
		st := rp.p.Alone(end, own)
		g.protectAlone(route, rp, err)
		return st
	}
	g.protectBack(route, rp)
	return rp.p.Join(end, own, g.peers(route, rp, got))
}

// peers decodes the others' reports; one that cannot be read (another
// version's, or written to Redis by someone else) is left out, and said
// once.
func (g *Gateway) peers(route string, rp *routeProtect, prs []fleetbus.PeerReport) []protect.Peer {
	ps := make([]protect.Peer, 0, len(prs))
	for _, pr := range prs {
		r, err := protect.DecodeReport(pr.Report)
		if err != nil {
			if !rp.fleet.bad.Swap(true) {
				g.log.Warn("protect: an instance's report in Redis cannot be read; it is left out",
					"route", route, "instance", pr.Instance, "error", err.Error())
			}
			continue
		}
		ps = append(ps, protect.Peer{Report: r, Age: pr.Age})
	}
	return ps
}

func (g *Gateway) protectAlone(route string, rp *routeProtect, err error) {
	if rp.fleet.alone.set(err) {
		g.log.Warn("protect: the fleet's reports are out of reach; this instance protects the upstream alone, with its share of the fleet's limit",
			"route", route, "error", err.Error())
	}
}

func (g *Gateway) protectBack(route string, rp *routeProtect) {
	if rp.fleet.alone.clear() {
		g.log.Info("protect: the fleet's reports are back; the instances share one limit again", "route", route)
	}
}

// status is what /readyz says of the route's protection: "" while it
// shares the fleet's limit, or has no fleet.
func (f *fleetProtect) status(route string) string {
	cause, on := f.alone.why()
	if !on {
		return ""
	}
	return "protection of route " + route + " decides on this instance's own, the fleet's reports are out of reach: " + cause
}

// leaveFleet takes this instance's report of route away, so that the
// others take its share at once: the route's protection is gone, or the
// gateway stops.
func (g *Gateway) leaveFleet(bus *fleetbus.Bus, route string) {
	if bus == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), protectCallWait)
	defer cancel()
	_ = bus.ProtectLeave(ctx, route, g.ids.Prefix()) // its report ends after protectTTL anyway
}

// protectStatus lists what the protections deciding alone say, for
// Degraded.
func (gen *generation) protectStatus() []string {
	var ds []string
	for _, r := range gen.routes {
		if r.protect != nil {
			if s := r.protect.fleet.status(r.id); s != "" {
				ds = append(ds, s)
			}
		}
	}
	return ds
}
