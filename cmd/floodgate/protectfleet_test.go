package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/rehearse"
)

const protectFleetConfig = `
server: {listen: "{{LISTEN}}"}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
store: {type: redis, redis: {addrs: ["{{REDIS}}"], timeout: 300ms}}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UPSTREAM}}"], timeout: 700ms}
    protect: {min: 5, max: 300, warm_up: 0s}
`

// protected is what GET /admin/protect says of the route coupon.
func (p *proc) protected() (limit, admitting float64, instances int) {
	p.t.Helper()
	var v struct {
		Routes []struct {
			Limit, Admitting float64
			Instances        int
		}
	}
	r := p.admin("GET", "/admin/protect")
	if err := json.Unmarshal([]byte(r.body), &v); err != nil || len(v.Routes) != 1 {
		p.t.Fatalf("GET /admin/protect: %d %s", r.code, r.body)
	}
	return v.Routes[0].Limit, v.Routes[0].Admitting, v.Routes[0].Instances
}

// Gateway processes on one Redis share a protected route's limit: one
// SIGKILLed is dropped within seconds and the others take its share; one
// started mid-run enters the fleet and is given a share of its own.
func TestProtectFleetKillAndJoin(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	mock, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 100 * time.Millisecond, Capacity: 60, OverloadLatency: time.Second, Body: "ok",
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	start := func() *proc {
		f := newFixture(t, mock)
		f.write(strings.ReplaceAll(protectFleetConfig, "{{REDIS}}", srv.Addr()))
		return f.serve()
	}
	ps := []*proc{start(), start()}
	var stop atomic.Bool
	var wg sync.WaitGroup
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	load := func(p *proc, clients int) {
		for range clients { // each one request each 100 ms
			wg.Go(func() {
				for next := time.Now(); !stop.Load(); next = next.Add(100 * time.Millisecond) {
					time.Sleep(time.Until(next))
					if resp, err := client.Get("http://" + p.f.listen + "/coupon"); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
	}
	load(ps[0], 6)
	load(ps[1], 6)
	instances := func(p *proc, n int) {
		p.waitFor(fmt.Sprintf("%d instances sharing the limit", n), func() bool {
			_, _, got := p.protected()
			return got == n
		})
	}
	instances(ps[0], 2)
	instances(ps[1], 2)

	ps[1].signal(syscall.SIGKILL)
	ps[1].wait()
	instances(ps[0], 1)
	// Alone in the fleet, it admits the whole limit.
	ps[0].waitFor("the dead instance's share taken", func() bool {
		limit, admitting, _ := ps[0].protected()
		return admitting > 0.95*limit
	})

	late := start()
	load(late, 6)
	instances(ps[0], 2)
	instances(late, 2)
	late.waitFor("the new instance to admit a share of its own", func() bool {
		limit, admitting, _ := late.protected()
		return admitting > 0.25*limit && admitting < 0.75*limit
	})
	// An operator sees it with floodgate ctl protect.
	out, errOut, code := late.ctl("protect")
	if code != 0 || !strings.Contains(out, "coupon") || !strings.Contains(out, "2 instances") || !strings.Contains(out, "SHARED BY") {
		t.Errorf("ctl protect: exit %d\n%s%s", code, out, errOut)
	}
}
