package config

import (
	"fmt"
	"strings"
)

// The store block.

func (v *validator) store(s *Store) {
	switch s.Type {
	case StoreMemory, StoreRedis:
	default:
		v.errorf("store.type", "unknown store type %q (memory, redis)", s.Type)
	}
	r := &s.Redis
	switch r.Mode {
	case RedisStandalone, RedisCluster, RedisSentinel:
	default:
		v.errorf("store.redis.mode", "unknown mode %q (standalone, cluster, sentinel)", r.Mode)
	}
	if s.Type == StoreRedis && len(r.Addrs) == 0 && !v.failed("store.redis.addrs") {
		v.errorAt(v.lineOr("store.redis.addrs", "store.type"), "store.redis.addrs", "store.type is redis but no addrs are given")
	}
	for i, a := range r.Addrs {
		v.addr(fmt.Sprintf("store.redis.addrs[%d]", i), a, true)
	}
	if r.Mode == RedisStandalone && len(r.Addrs) > 1 {
		v.errorf("store.redis.addrs", "standalone mode takes one address, not %d (cluster seed nodes need mode: cluster; sentinels, mode: sentinel)", len(r.Addrs))
	}
	if r.Mode == RedisSentinel && r.MasterName == "" {
		v.errorAt(v.lineOr("store.redis.master_name", "store.redis.mode"), "store.redis.master_name", "sentinel mode needs master_name")
	}
	if r.Mode != RedisSentinel && r.MasterName != "" {
		v.errorf("store.redis.master_name", "only sentinel mode has a master_name (mode is %s)", r.Mode)
	}
	if r.PasswordEnv != "" {
		if r.Password != "" {
			v.errorf("store.redis.password_env", "give password or password_env, not both")
		} else if val, ok := v.env("store.redis.password_env", r.PasswordEnv); ok {
			r.Password = val
		}
	}
	if r.DB < 0 {
		v.errorf("store.redis.db", "%d is negative", r.DB)
	}
	if r.Mode == RedisCluster && r.DB != 0 {
		v.errorf("store.redis.db", "Redis Cluster has only db 0")
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		v.errorf("store.redis.prefix", "%q holds a brace, which would move the Redis Cluster hash tag", r.Prefix)
	}
	v.positive("store.redis.timeout", r.Timeout)
	if s.Memory.MaxKeys <= 0 {
		v.errorf("store.memory.max_keys", "%d must be positive", s.Memory.MaxKeys)
	}
	if s.LocalRejectsMax <= 0 {
		v.errorf("store.local_rejects_max", "%d must be positive (local_rejects: false turns local rejects off)", s.LocalRejectsMax)
	}
	v.onError("store.on_error", s.OnError, false)
}

func (v *validator) onError(p string, o OnError, inherit bool) {
	switch o {
	case OnErrorAllow, OnErrorDeny, OnErrorLocal:
		return
	case "":
		if inherit {
			return
		}
	}
	v.errorf(p, "unknown on_error %q (allow, deny, local)", o)
}
