package fleetbus

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

//go:embed announce.lua
var announceSource string

var announceScript = rueidis.NewLuaScript(announceSource)

//go:embed fleet.lua
var fleetSource string

var fleetScript = rueidis.NewLuaScript(fleetSource)

// Bounds of what Instances reads: more instances than a fleet has, and an
// entry many times the size of floodgate's own.
const (
	MaxInstances = 1000
	MaxInfo      = 4 << 10
)

// Announce records that the gateway instance id is alive for ttl and
// returns how many instances are alive, this one included. Gateways call it
// periodically so that, when Redis fails, each one knows what share of a
// limit it may grant on its own (on_error: local grants 1/N of each limit,
// N being the instances alive before the failure). info, when not empty,
// is what the instance says of itself, which Instances returns while the
// announcement lasts; it must be at most MaxInfo bytes.
func (b *Bus) Announce(ctx context.Context, id string, info []byte, ttl time.Duration) (int, error) {
	if len(id) > MaxInfo || len(info) > MaxInfo {
		return 0, fmt.Errorf("redisstore: announcement of %d+%d bytes, over %d", len(id), len(info), MaxInfo)
	}
	c, err := b.conn.Client("announce")
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	n, err := announceScript.Exec(ctx, c, b.instanceKeys(),
		[]string{id, strconv.FormatInt(ttl.Microseconds(), 10), string(info)}).AsInt64()
	if err != nil {
		return 0, unavailable("announce", err)
	}
	return int(n), nil
}

// instanceKeys are the sorted set of live instances and the hash of what
// they announced. The hash's name holds the set's name as its hash tag, so
// that in a Redis Cluster both are in one slot and one script reaches them.
func (b *Bus) instanceKeys() []string {
	set := b.prefix + "instances"
	return []string{set, "{" + set + "}:info"}
}

// An Announcement is what one live instance announced.
type Announcement struct {
	ID      string
	Info    []byte    // nil: the instance announced no info
	Seen    time.Time // when it last announced, by the Redis clock; zero without info
	Expires time.Time // when it counts as gone, by the Redis clock
}

// Instances returns what the live instances announced, by the Redis clock
// now, in the order of their expiry. skipped counts the live instances
// left out: past the first MaxInstances, or whose id or entry is longer
// than MaxInfo, or whose entry is not one Announce wrote.
func (b *Bus) Instances(ctx context.Context) (as []Announcement, now time.Time, skipped int, err error) {
	c, err := b.conn.Client("instances")
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	// An operator's read (GET /admin/fleet), not a request's decision:
	// it has the time a change has, not the decision budget.
	ctx, cancel := context.WithTimeout(ctx, max(b.timeout, changeTimeout))
	defer cancel()
	vs, err := fleetScript.Exec(ctx, c, b.instanceKeys(),
		[]string{strconv.Itoa(MaxInstances), strconv.Itoa(MaxInfo)}).ToArray()
	if err != nil {
		return nil, time.Time{}, 0, unavailable("instances", err)
	}
	if len(vs) < 3 || (len(vs)-3)%3 != 0 {
		return nil, time.Time{}, 0, unavailable("instances", fmt.Errorf("answer of %d values", len(vs)))
	}
	nowUS, err1 := vs[0].AsInt64()
	skip, err2 := vs[2].AsInt64()
	if err1 != nil || err2 != nil {
		return nil, time.Time{}, 0, unavailable("instances", fmt.Errorf("bad answer: %v, %v", err1, err2))
	}
	now, skipped = time.UnixMicro(nowUS), int(skip)
	for i := 3; i < len(vs); i += 3 {
		id, err1 := vs[i].ToString()
		exp, err2 := vs[i+1].AsFloat64()
		if err1 != nil || err2 != nil {
			skipped++
			continue
		}
		a := Announcement{ID: id, Expires: time.UnixMicro(int64(exp))}
		if entry, err := vs[i+2].ToString(); err == nil {
			seen, info, ok := strings.Cut(entry, " ")
			us, err := strconv.ParseInt(seen, 10, 64)
			if !ok || err != nil || us <= 0 {
				skipped++
				continue
			}
			a.Seen, a.Info = time.UnixMicro(us), []byte(info)
		}
		as = append(as, a)
	}
	return as, now, skipped, nil
}

// Withdraw removes the announcement of the instance id, for an instance
// that stops: the others no longer count it, nor list it.
func (b *Bus) Withdraw(ctx context.Context, id string) error {
	c, err := b.conn.Client("withdraw")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	keys := b.instanceKeys()
	for _, r := range c.DoMulti(ctx,
		c.B().Zrem().Key(keys[0]).Member(id).Build(),
		c.B().Hdel().Key(keys[1]).Field(id).Build()) {
		if err := r.Error(); err != nil {
			return unavailable("withdraw", err)
		}
	}
	return nil
}
