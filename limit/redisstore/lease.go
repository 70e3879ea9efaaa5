package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
)

//go:embed renew.lua
var renewSource string

var renewScript = rueidis.NewLuaScript(renewSource)

// Release implements limit.Store: one ZREM per concurrency limit, sent
// together in one round trip. Removing a lease that is not there does
// nothing, so a release may follow a Decide that timed out whether or not
// its script ran; a lease that a late script takes after its release
// still expires after its rule's LeaseTTL.
func (s *Store) Release(ctx context.Context, lease string, limits ...limit.Limit) error {
	keys := concurrencyKeys(s.prefix, limits)
	if len(keys) == 0 {
		return nil
	}
	c, err := s.get("release")
	if err != nil {
		return err
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Zrem().Key(k).Member(lease).Build()
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return unavailable("release", err)
		}
	}
	return nil
}

// Renew implements limit.Store. The leases are extended from Redis TIME,
// not from now, like every other time of this store.
func (s *Store) Renew(ctx context.Context, _ time.Time, lease string, limits ...limit.Limit) error {
	var keys, args []string
	for _, l := range limits {
		if l.Rule == nil || l.Rule.Algorithm != limit.Concurrency {
			continue
		}
		if err := l.Rule.Validate(); err != nil {
			return err
		}
		if args == nil {
			args = append(make([]string, 0, 2+len(limits)), s.offsetArg(), lease)
		}
		_, _, _, _, ttl := l.Rule.Params()
		keys = append(keys, limit.StoredKey(s.prefix, l.Rule, l.Key))
		args = append(args, strconv.FormatInt(ttl, 10))
	}
	if len(keys) == 0 {
		return nil
	}
	c, err := s.get("renew")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return unavailable("renew", renewScript.Exec(ctx, c, keys, args).Error())
}

func concurrencyKeys(prefix string, limits []limit.Limit) []string {
	var keys []string
	for _, l := range limits {
		if l.Rule != nil && l.Rule.Algorithm == limit.Concurrency {
			keys = append(keys, limit.StoredKey(prefix, l.Rule, l.Key))
		}
	}
	return keys
}
