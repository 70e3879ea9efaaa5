package events

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The results of gateway_events_total.
const (
	resultRecorded  = "recorded"  // durable: in the spool, or in the sink without one
	resultDelivered = "delivered" // accepted by the sink
	resultDropped   = "dropped"   // refused: queue full, spool full, or recorder closed
	resultFailed    = "failed"    // could not be made durable: an I/O or sink error
)

type metrics struct {
	total   *prometheus.CounterVec
	spooled prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_events_total",
			Help: "Events by type and result: recorded (durable), delivered (accepted by the sink), dropped (refused: queue or spool full), failed (I/O or sink error).",
		}, []string{"type", "result"}),
		spooled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_events_spooled",
			Help: "Events in the spool not yet delivered to the sink.",
		}),
	}
	if reg != nil {
		m.total = register(reg, m.total)
		m.spooled = register(reg, m.spooled)
	}
	return m
}

// register registers c, or returns the collector already registered under
// its name: a recorder rebuilt on a config reload keeps counting into the
// same series instead of failing to start.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A conflicting collector under our name: count anyway, unexported.
	}
	return c
}

func (m *metrics) count(typ, result string, n int) {
	m.total.WithLabelValues(typ, result).Add(float64(n))
}

// tally counts a batch's events into gateway_events_total by type and
// result, adding each pair once for the events in a row that share it:
// a batch of a thousand audit events is two additions, not two thousand
// label lookups.
type tally struct {
	typ, result string
	n           int
	recorded    tallyRun // the recorded events, counted apart: every event is one
}

type tallyRun struct {
	typ string
	n   int
}

func (t *tally) add(m *metrics, typ, result string) {
	if result == resultRecorded {
		if t.recorded.n > 0 && t.recorded.typ != typ {
			m.count(t.recorded.typ, resultRecorded, t.recorded.n)
			t.recorded.n = 0
		}
		t.recorded.typ = typ
		t.recorded.n++
		return
	}
	if t.n > 0 && (t.typ != typ || t.result != result) {
		m.count(t.typ, t.result, t.n)
		t.n = 0
	}
	t.typ, t.result = typ, result
	t.n++
}

func (t *tally) flush(m *metrics) {
	if t.recorded.n > 0 {
		m.count(t.recorded.typ, resultRecorded, t.recorded.n)
	}
	if t.n > 0 {
		m.count(t.typ, t.result, t.n)
	}
	*t = tally{}
}
