package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

//go:embed announce.lua
var announceSource string

var announceScript = rueidis.NewLuaScript(announceSource)

// Announce records that the gateway instance id is alive for ttl and
// returns how many instances are alive, this one included. Gateways call it
// periodically so that, when Redis fails, each one knows what share of a
// limit it may grant on its own (on_error: local grants 1/N of each limit,
// N being the instances alive before the failure).
func (s *Store) Announce(ctx context.Context, id string, ttl time.Duration) (int, error) {
	c, err := s.get("announce")
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := announceScript.Exec(ctx, c, []string{s.prefix + "instances"},
		[]string{id, strconv.FormatInt(ttl.Microseconds(), 10)}).AsInt64()
	if err != nil {
		return 0, unavailable("announce", err)
	}
	return int(n), nil
}
