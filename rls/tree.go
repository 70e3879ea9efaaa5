package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/limit"
)

// Rules are the limits of every domain. The zero value and nil have none.
// Rules are immutable, so one value may serve any number of requests at
// once while a reload builds the next.
type Rules struct {
	domains map[string]*node
	names   []string // sorted
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// Limit is what one descriptor matched. It is shared by every request that
// matches the same rule: callers must not modify it.
type Limit struct {
	// Rule is a validated fixed-window limit.Rule, aligned to the epoch as
	// envoyproxy/ratelimit aligns its windows (now / unit * unit). Nil when
	// Unlimited, and when RequestsPerUnit is 0: a limit that rejects every
	// request, as envoyproxy/ratelimit reads 0, with nothing to count.
	// Its Name depends only on the domain and on the keys and values from
	// the top of the file to this descriptor, so a reload that changes
	// requests_per_unit keeps the counters.
	Rule *limit.Rule
	// Unit is rate_limit.unit, Period its length; UNKNOWN and 0 when
	// Unlimited.
	Unit   rlsv3.RateLimitResponse_RateLimit_Unit
	Period time.Duration
	// RequestsPerUnit is rate_limit.requests_per_unit; 0 when Unlimited.
	RequestsPerUnit uint32
	// Name is rate_limit.name, or "": what other limits' replaces refer to.
	Name      string
	Unlimited bool
	// Shadow is shadow_mode: the limit is counted but never rejects.
	Shadow bool
	// Replaces names the limits this one replaces when both match the
	// descriptors of one request.
	Replaces []string

	// Path holds the rule descriptors from the top of the file to this
	// one, one for each entry of the descriptors it matches.
	Path []Level
	// DetailedMetric is detailed_metric: statistics per value matched,
	// not per rule.
	DetailedMetric bool
	// QuotaMode is quota_mode: the limit is counted, and a request over
	// it is admitted with the limit's status OK; the answer's dynamic
	// metadata, when asked for, names it (Options.Metadata). Its Rule is
	// a shadow rule, so that the store counts the request's other limits
	// as when it is within.
	QuotaMode bool
	// Metadata is the descriptor's metadata, as the file gives it; nil
	// when there is none.
	Metadata map[string]any

	// quotaRule is Rule as a shadow rule, for a service in quota mode
	// (Options.QuotaMode); Rule itself when it is one already.
	quotaRule *limit.Rule

	// shared is whether a level of Path has ShareThreshold.
	shared bool
	// metric and metricNamed are metricOf(the limit), made with it so
	// that counting a hit builds no label.
	metric      string
	metricNamed bool
}

// quota reports whether l is a quota, by its quota_mode or because the
// service answers in quota mode.
func (l *Limit) quota(all bool) bool { return all || l.QuotaMode }

// rejects reports whether l rejects the request it is over: it is neither
// a shadow limit nor a quota.
func (l *Limit) rejects(allQuota bool) bool { return !l.Shadow && !l.quota(allQuota) }

// storeRule is the rule the store decides l by: its Rule, or a shadow copy
// when every limit is a quota.
func (l *Limit) storeRule(allQuota bool) *limit.Rule {
	if allQuota {
		return l.quotaRule
	}
	return l.Rule
}

// setQuotaRule makes Rule a shadow rule for a quota_mode limit, and
// quotaRule, before either is used: a rule's script arguments, derived on
// first use, hold its shadow flag.
func (l *Limit) setQuotaRule() error {
	if l.Rule == nil {
		return nil
	}
	l.Rule.Shadow = l.Rule.Shadow || l.QuotaMode
	l.quotaRule = l.Rule
	if !l.Rule.Shadow {
		l.quotaRule = l.Rule.WithCost(l.Rule.Cost)
		l.quotaRule.Shadow = true
	}
	return l.quotaRule.Validate()
}

// Level is one rule descriptor on a Limit's Path.
type Level struct {
	// Key and Value are written in the rule file; Value is "" for a
	// descriptor that matches any value, and may hold '*'.
	Key, Value string
	// ShareThreshold is share_threshold: every value that Value, a
	// wildcard, matches is counted under one counter.
	ShareThreshold bool
	// ValueToMetric is value_to_metric: statistics name the value
	// matched here rather than the rule's.
	ValueToMetric bool
}

// CounterValue is what entry i of a descriptor that matched l is counted
// under: its value, or, at a level with share_threshold, the wildcard it
// matched, which every value it matches shares.
func (l *Limit) CounterValue(i int, value string) string {
	if l != nil && l.shared && i < len(l.Path) && l.Path[i].ShareThreshold {
		return l.Path[i].Value
	}
	return value
}

// node is one descriptor of a rule file, or the top of a domain.
type node struct {
	// children holds the nested descriptors by key and value; one
	// without a value is held under an empty Value.
	children map[Entry]*node
	// wild holds, by key, the nested descriptors whose value holds a '*',
	// in file order: envoyproxy/ratelimit takes the first that matches,
	// not the longest or the most specific.
	wild  map[string][]wildcard
	limit *Limit
}

// wildcard is a rule value with '*' in it, split at each '*': each '*'
// stands for any run of bytes, none included, so "foo*" is a prefix and
// "foo*bar*baz" a value that starts with foo, ends with baz and holds bar
// between them.
type wildcard struct {
	parts []string
	node  *node
}

func newWildcard(value string, n *node) wildcard {
	return wildcard{parts: strings.Split(value, "*"), node: n}
}

// match reports whether v matches the pattern. Taking each middle part at
// its first place after the one before is enough: '*' matches any run, so
// an earlier place never leaves less room for what follows.
func (w wildcard) match(v string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}

// Match returns the limit that applies to one descriptor of domain, or nil.
//
// It follows envoyproxy/ratelimit: entry i is looked up among the nested
// descriptors that entry i-1 matched, first by key and exact value, then by
// key and a wildcard value ("foo*", "foo*bar*baz": '*' matches any run of
// bytes), the first in file order that matches, then by key alone; the descriptor's limit
// is that of the node its last entry matched. A descriptor longer or shorter
// than the rules, or one whose last node has no limit, has none.
func (r *Rules) Match(domain string, entries []Entry) *Limit {
	if r == nil || len(entries) == 0 {
		return nil
	}
	n := r.domains[domain]
	if n == nil {
		return nil
	}
	for _, e := range entries {
		n = n.find(e)
		if n == nil {
			return nil
		}
	}
	return n.limit
}

func (n *node) find(e Entry) *node {
	// An empty request value never matches exactly: an empty rule value
	// is a key-only rule, which comes after the wildcards.
	if e.Value != "" {
		if c := n.children[e]; c != nil {
			return c
		}
	}
	for _, w := range n.wild[e.Key] {
		if w.match(e.Value) {
			return w.node
		}
	}
	return n.children[Entry{Key: e.Key}]
}

// Domains lists the domains, sorted.
func (r *Rules) Domains() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

func build(files []*file) *Rules {
	r := &Rules{domains: make(map[string]*node, len(files))}
	for _, f := range files {
		r.domains[f.domain] = f.root
		r.names = append(r.names, f.domain)
	}
	slices.Sort(r.names)
	return r
}

// ruleName names a limit's counters: readable enough to find in the store
// and in metrics, and fixed by the domain and the path of keys and values
// to the descriptor, so that it survives a reload while the rate changes.
// The domain part is cut to keep the name within limit.Rule's 200 bytes;
// the hash keeps cut or folded domains apart.
func ruleName(domain string, trail []Level) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	write := func(s string) {
		// Length-prefixed, so that no two paths encode alike.
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	write(domain)
	for _, e := range trail {
		write(e.Key)
		write(e.Value)
	}
	var b strings.Builder
	b.WriteString("rls:")
	for i := 0; i < len(domain) && i < 40; i++ {
		c := domain[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			c = '_'
		}
		b.WriteByte(c)
	}
	b.WriteByte(':')
	b.WriteString(hex.EncodeToString(h.Sum(nil))[:16])
	return b.String()
}
