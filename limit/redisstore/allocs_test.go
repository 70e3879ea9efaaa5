package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// decideAllocs is the most allocations Decide may make for a request of
// four fixed windows, two of whose keys change from request to request,
// with the decisions' array given (Request.Into): rueidis's array for the
// reply. Lower it as allocations are removed.
const decideAllocs = 1

// TestDecideAllocs pins what a decision allocates on the way every
// decision of an idle gateway takes: through the batcher, sent at once as
// its own call.
func TestDecideAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled values")
	}
	s := open(t, testredis.Start(t), remoteOnly)
	fixed := func(name string) *limit.Rule {
		return valid(t, &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Minute}})
	}
	global, api, user, ip := fixed("global"), fixed("api"), fixed("user"), fixed("ip")
	keys := make([]limit.Key, 64)
	for i := range keys {
		keys[i] = limit.NewKey(limit.Part{Kind: "ip", Value: "10.0.0." + strconv.Itoa(i)})
	}
	var into [4]limit.Decision
	req := &limit.Request{Into: into[:], Limits: []limit.Limit{
		{Rule: global, Key: limit.NewKey(limit.Part{Kind: "global"})},
		{Rule: api, Key: limit.NewKey(limit.Part{Kind: "route", Value: "api"})},
		{Rule: user, Key: keys[0]},
		{Rule: ip, Key: keys[0]},
	}}
	ctx := context.Background()
	i := 0
	decide := func() {
		i++
		req.Limits[2].Key, req.Limits[3].Key = keys[i%len(keys)], keys[(i+1)%len(keys)]
		req.Now = time.Now()
		if res, err := s.Decide(ctx, req); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	for range 10 {
		decide()
	}
	if n := testing.AllocsPerRun(200, decide); n > decideAllocs {
		t.Errorf("Decide made %v allocations, want at most %d", n, decideAllocs)
	}
}
