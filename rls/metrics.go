package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxDetailedValues is how many distinct descriptor labels that name
// request values (detailed_metric, value_to_metric) one rule gets in
// gateway_rls_descriptor_hits_total; the hits of any further ones are
// counted under the rule's label with OtherValues appended, so that
// clients sending new values cannot grow the series without bound.
const MaxDetailedValues = 1000

// OtherValues ends the descriptor label that folds the values of a rule
// beyond MaxDetailedValues: "tenant (other)". A label built from a request
// has '_' or '.' after the rule's keys, never a space, so that no value
// can take the fold's label.
const OtherValues = " (other)"

// OtherOverrides is the label that folds the descriptors with their own
// limit (RateLimitDescriptor.limit) beyond MaxDetailedValues labels in a
// domain, whatever their keys: the keys are the request's too.
const OtherOverrides = "limit override" + OtherValues

// MaxLabelBytes bounds a descriptor label built from a request: a longer
// one keeps its first bytes, cut at a character, then '#' and 16 hex
// digits of the SHA-256 of the whole label, so that labels that differ
// only past the cut still differ.
const MaxLabelBytes = 256

// boundLabel is label within MaxLabelBytes.
func boundLabel(label string) string {
	if len(label) <= MaxLabelBytes {
		return label
	}
	sum := sha256.Sum256([]byte(label))
	cut := MaxLabelBytes - 17
	for cut > 0 && !utf8.RuneStart(label[cut]) {
		cut--
	}
	return label[:cut] + "#" + hex.EncodeToString(sum[:8])
}

// Results of gateway_rls_descriptor_hits_total, named as
// envoyproxy/ratelimit names its per-descriptor stats.
var hitResults = [...]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// descriptorMetrics counts each descriptor's Outcome as envoyproxy/ratelimit's
// ratelimit.service.rate_limit.DOMAIN.DESCRIPTOR.* stats do.
type descriptorMetrics struct {
	hits *prometheus.CounterVec
	// series caches, by domain and label, the counters of hitResults:
	// looking them up in hits on every descriptor would cost the hot
	// path a hash of the labels and a lock each.
	series sync.Map // [2]string: *[len(hitResults)]prometheus.Counter

	mu sync.Mutex
	// values holds, by domain and rule label, the detailed labels given
	// a series of their own. It outlives a reload of the rules, so that
	// reloading does not lift the bound.
	values map[[2]string]map[string]bool
}

func newDescriptorMetrics() *descriptorMetrics {
	return &descriptorMetrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rls_descriptor_hits_total",
			Help: "Hits of ShouldRateLimit descriptors with a limit, by domain, descriptor (the rule's key path, or the request's keys and values with detailed_metric) and result: total_hits, over_limit, near_limit, within_limit, shadow_mode, as envoyproxy/ratelimit's stats.",
		}, []string{"domain", "descriptor", "result"}),
		values: map[[2]string]map[string]bool{},
	}
}

// observe adds o's counts to the series of its descriptor label.
func (m *descriptorMetrics) observe(o *Outcome) {
	k := [2]string{o.Domain, m.label(o)}
	cs, ok := m.series.Load(k)
	if !ok {
		// Every result's series is made with the first hit, so that
		// a descriptor charts its over_limit from 0, as envoy's
		// counters do.
		var c [len(hitResults)]prometheus.Counter
		for i, r := range hitResults {
			c[i] = m.hits.WithLabelValues(k[0], k[1], r)
		}
		cs, _ = m.series.LoadOrStore(k, &c)
	}
	c := cs.(*[len(hitResults)]prometheus.Counter)
	for i, n := range [...]int64{o.TotalHits, o.OverLimit, o.NearLimit, o.WithinLimit, o.ShadowMode} {
		if n > 0 {
			c[i].Add(float64(n))
		}
	}
}

// label is o's descriptor label, bounded by MaxDetailedValues.
func (m *descriptorMetrics) label(o *Outcome) string {
	rule, named := ruleLabel(o)
	if !named {
		return rule
	}
	var label string
	if o.Limit.DetailedMetric || len(o.Limit.Path) == 0 {
		label = requestLabel(o)
	} else {
		label = valueLabel(o)
	}
	label = boundLabel(label)
	// The labels of a rule are bounded together; those of descriptors
	// with their own limit, by domain, under "" (no rule label is empty).
	k, other := [2]string{o.Domain, rule}, rule+OtherValues
	if len(o.Limit.Path) == 0 {
		k, other = [2]string{o.Domain, ""}, OtherOverrides
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.values[k]
	if seen == nil {
		seen = map[string]bool{}
		m.values[k] = seen
	}
	if !seen[label] {
		if len(seen) >= MaxDetailedValues {
			return other
		}
		seen[label] = true
	}
	return label
}

// ruleLabel is envoyproxy/ratelimit's stat key of o's rule without the
// domain (Limit.metric), and whether o's label names values of the request
// instead (detailed_metric, value_to_metric on a level). A request's own
// limit (RateLimitDescriptor.limit) has no rule: envoyproxy/ratelimit names
// it after the request's entries, and its rule label is their keys.
func ruleLabel(o *Outcome) (label string, named bool) {
	l := o.Limit
	if len(l.Path) == 0 {
		var b strings.Builder
		for i, e := range o.Descriptor.GetEntries() {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.GetKey())
		}
		return b.String(), true
	}
	if l.metric == "" {
		return metricOf(l) // a Limit not made by the rule files
	}
	return l.metric, l.metricNamed
}

// metricOf is what ruleLabel says of a limit of the rule files: each
// level's key, and "_VALUE" when the rule file gives one, joined by '.'.
func metricOf(l *Limit) (label string, named bool) {
	var b strings.Builder
	named = l.DetailedMetric
	for i, lv := range l.Path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(lv.Key)
		if lv.Value != "" {
			b.WriteByte('_')
			b.WriteString(lv.Value)
		}
		// A level with share_threshold is named by its pattern,
		// whatever the request sends (below).
		named = named || lv.ValueToMetric && !lv.ShareThreshold
	}
	return b.String(), named
}

// valueLabel is ruleLabel with the request's value at each level with
// value_to_metric. A level with share_threshold keeps its pattern, as
// envoyproxy/ratelimit's stat keys do: its values share one counter.
func valueLabel(o *Outcome) string {
	var b strings.Builder
	for i, l := range o.Limit.Path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(l.Key)
		v := l.Value
		if l.ValueToMetric && !l.ShareThreshold && i < len(o.Descriptor.GetEntries()) {
			v = o.Descriptor.GetEntries()[i].GetValue()
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// requestLabel is envoyproxy/ratelimit's detailed stat key without the
// domain: the request's entries as KEY_VALUE, joined by '.', with the
// pattern in place of the value at a level with share_threshold.
func requestLabel(o *Outcome) string {
	var b strings.Builder
	path := o.Limit.Path
	for i, e := range o.Descriptor.GetEntries() {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.GetKey())
		v := e.GetValue()
		if i < len(path) && path[i].ShareThreshold {
			v = path[i].Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
