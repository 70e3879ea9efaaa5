package gateway

import (
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
)

func netDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }

// counterValue reads one series of a counter from the harness's registry.
func counterValue(t *testing.T, h *harness, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func mustParseB(b *testing.B, yaml string) *config.Config {
	b.Helper()
	cfg, err := config.Parse("bench.yaml", []byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testClock is a gateway clock (Options.Now) that a test steps forward:
// the wall clock plus the steps so far, safe for concurrent use. It keeps
// running between steps, so that what real I/O takes (a slow upstream, a
// timeout of the HTTP client) still shows in the durations the gateway
// measures; a step stands for a wait on the gateway's own clock, such as
// a breaker's open_for.
type testClock struct {
	offset atomic.Int64
	frozen atomic.Int64 // Unix ns the clock stopped at; 0 while it runs
}

// newTestClock returns a clock that runs from just after the wall clock's
// next minute: a test's requests, seconds of them, then fall in one
// window of every limit aligned to the epoch up to a minute long,
// wherever the wall clock is when the test runs. On the wall clock, two
// requests meant for one 10 s window fall either side of its end once in
// a few hundred tries, more often on a busy machine. A minute ahead keeps
// the tokens the tests sign (valid for an hour) valid.
func newTestClock() *testClock {
	c := &testClock{}
	now := time.Now()
	c.offset.Store(int64(now.Truncate(time.Minute).Add(time.Minute + time.Millisecond).Sub(now)))
	return c
}

func (c *testClock) Now() time.Time {
	if ns := c.frozen.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Freeze stops the clock where it is, for a test whose requests must fall
// in one second of the gateway's however long the machine takes to send
// them.
func (c *testClock) Freeze() { c.frozen.Store(c.Now().UnixNano()) }

// Step moves the clock d forward.
func (c *testClock) Step(d time.Duration) { c.offset.Add(int64(d)) }
