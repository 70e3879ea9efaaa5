package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
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
// not from now, like every other time of this store. On a cluster, each
// slot's leases are renewed by their own call.
func (s *Store) Renew(ctx context.Context, _ time.Time, lease string, limits ...limit.Limit) error {
	var calls []rueidis.LuaExec
	at := map[string]int{} // a call's place in calls, by hash tag
	for _, l := range limits {
		if l.Rule == nil || l.Rule.Algorithm != limit.Concurrency {
			continue
		}
		if err := l.Rule.Validate(); err != nil {
			return err
		}
		key := core.StoredKey(s.prefix, l.Rule, l.Key)
		t := ""
		if s.mode == Cluster {
			t = tag(key)
		}
		x, ok := at[t]
		if !ok {
			x = len(calls)
			at[t] = x
			calls = append(calls, rueidis.LuaExec{Args: []string{s.offsetArg(), lease}})
		}
		ttl := core.Params(l.Rule).Lease
		calls[x].Keys = append(calls[x].Keys, key)
		calls[x].Args = append(calls[x].Args, strconv.FormatInt(ttl, 10))
	}
	if len(calls) == 0 {
		return nil
	}
	c, err := s.get("renew")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for _, e := range calls {
		if err := renewScript.Exec(ctx, c, e.Keys, e.Args).Error(); err != nil {
			return unavailable("renew", err)
		}
	}
	return nil
}

func concurrencyKeys(prefix string, limits []limit.Limit) []string {
	var keys []string
	for _, l := range limits {
		if l.Rule != nil && l.Rule.Algorithm == limit.Concurrency {
			keys = append(keys, core.StoredKey(prefix, l.Rule, l.Key))
		}
	}
	return keys
}
