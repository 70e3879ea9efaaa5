package gateway

import (
	"log/slog"

	"github.com/floodgate-gw/floodgate/config"
	"net"
	"testing"
	"time"
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
