package fleetbus

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The instances that protect one upstream together (a route's protect:)
// share their reports here (protect.lua): each sends its own once an
// interval and reads the others' latest in the same call, so that a
// route costs one call an interval per instance, whatever its traffic.
// A report older than the ttl is an instance that died: the call drops
// it. The report's text is package protect's; the bus carries it.
//
// A route's hash is PREFIX{protect/ROUTE}:fleet, one slot of a cluster;
// no limit's key has that tag, since a limit's name has no '/'.

//go:embed protect.lua
var protectSource string

var protectScript = rueidis.NewLuaScript(protectSource)

// MaxPeers bounds the reports one call reads: more instances than a fleet
// has.
const MaxPeers = 1000

// A PeerReport is another instance's latest report of a protected route.
type PeerReport struct {
	Instance string
	Age      time.Duration // since it was written, by the Redis clock
	Report   string
}

// ProtectReport writes instance id's report of the protected route name,
// and returns the others' that are younger than ttl.
func (b *Bus) ProtectReport(ctx context.Context, name, id, report string, ttl time.Duration) ([]PeerReport, error) {
	if report == "" || report == "?" {
		return nil, fmt.Errorf("redisstore: protect report: empty")
	}
	return b.protectCall(ctx, name, id, report, ttl)
}

// ProtectRead returns the reports of name's instances but id younger than
// ttl, writing none: id enters the fleet.
func (b *Bus) ProtectRead(ctx context.Context, name, id string, ttl time.Duration) ([]PeerReport, error) {
	return b.protectCall(ctx, name, id, "?", ttl)
}

// ProtectLeave takes instance id's report of name away: it stops, and the
// others take its share at once rather than after the ttl.
func (b *Bus) ProtectLeave(ctx context.Context, name, id string) error {
	_, err := b.protectCall(ctx, name, id, "", time.Second)
	return err
}

func (b *Bus) protectCall(ctx context.Context, name, id, report string, ttl time.Duration) ([]PeerReport, error) {
	cl, err := b.conn.Client("protect")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	vs, err := protectScript.Exec(ctx, cl, []string{b.prefix + "{protect/" + name + "}:fleet"}, []string{
		id, report, strconv.FormatInt(ttl.Milliseconds(), 10),
		strconv.FormatInt(b.offset.Load()/1000, 10), strconv.Itoa(MaxPeers),
	}).ToArray()
	if err != nil {
		return nil, unavailable("protect", err)
	}
	if len(vs)%3 != 0 || len(vs) > 3*MaxPeers {
		return nil, unavailable("protect", fmt.Errorf("answer of %d values", len(vs)))
	}
	out := make([]PeerReport, 0, len(vs)/3)
	for i := 0; i < len(vs); i += 3 {
		inst, err1 := vs[i].ToString()
		age, err2 := vs[i+1].AsInt64()
		rep, err3 := vs[i+2].ToString()
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, unavailable("protect", fmt.Errorf("bad answer at %d", i))
		}
		out = append(out, PeerReport{Instance: inst, Age: time.Duration(age) * time.Millisecond, Report: rep})
	}
	return out, nil
}
