package stores

import (
	"testing"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// The configuration spells Redis's modes as the store does, so Open
// converts one to the other as they are; config cannot import the store,
// which would make the YAML schema depend on a Redis client.
func TestRedisModesAgree(t *testing.T) {
	t.Parallel()
	for c, s := range map[config.RedisMode]redisstore.Mode{
		config.RedisStandalone: redisstore.Standalone,
		config.RedisCluster:    redisstore.Cluster,
		config.RedisSentinel:   redisstore.Sentinel,
	} {
		if string(c) != string(s) {
			t.Errorf("config's %q is the store's %q", c, s)
		}
	}
}
