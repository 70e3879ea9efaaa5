package rls

import (
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Headers chooses the rate-limit headers an answer asks Envoy to add to
// the response (response_headers_to_add).
type Headers string

const (
	// NoHeaders adds none, as envoyproxy/ratelimit by default; so does
	// the zero value, "" (rls.response_headers' none and its default map
	// to Headers as they are written).
	NoHeaders Headers = "none"
	// IETFHeaders adds RateLimit-Policy and RateLimit as the gateway sends
	// them (draft-ietf-httpapi-ratelimit-headers):
	// `"NAME";q=LIMIT;w=WINDOW` and `"NAME";r=REMAINING;t=RESET`.
	IETFHeaders Headers = "ietf"
	// EnvoyHeaders adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, plain numbers, as envoyproxy/ratelimit does with
	// LIMIT_RESPONSE_HEADERS_ENABLED and its default header names.
	EnvoyHeaders Headers = "envoy"
)

// DefaultNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// Outcome is what one descriptor of a ShouldRateLimit call came to, in the
// terms of envoyproxy/ratelimit's per-descriptor stats, for metrics: it is
// passed to Options.Observe for every descriptor with a limit (not
// unlimited, not replaced).
type Outcome struct {
	Domain     string
	Descriptor *rlsv3ext.RateLimitDescriptor
	Limit      *Limit

	// TotalHits is the descriptor's hits. When what the limit has left is
	// unknown (a limit Redis Cluster did not ask, a read that failed),
	// the other counts are 0.
	TotalHits int64
	// OverLimit are the hits above the limit, WithinLimit all the hits
	// of a descriptor its limit admits, and NearLimit the hits above
	// the near-limit threshold (floor(requests_per_unit × the ratio)) and
	// within the limit, as envoyproxy/ratelimit counts them: a request
	// that crosses a threshold counts only its part beyond it.
	OverLimit, NearLimit, WithinLimit int64
	// ShadowMode is the hits of a shadow_mode limit over its limit.
	ShadowMode int64
}

// count fills o's counts for a limit that judged allowed with left
// remaining; counted says whether the store counted the hits (left is then
// after them, else before).
func (o *Outcome) count(ratio float64, allowed, counted bool, left int64) {
	hits, per := o.TotalHits, int64(o.Limit.RequestsPerUnit)
	near := int64(math.Floor(float64(per) * ratio))
	before, after := per-left, per-left+hits
	if counted {
		before, after = per-left-hits, per-left
	}
	if !allowed {
		if before >= per {
			o.OverLimit = hits
		} else {
			o.OverLimit = max(after-per, 0)
			o.NearLimit = max(per-max(near, before), 0)
		}
		if o.Limit.Shadow {
			o.ShadowMode = hits
		}
		return
	}
	o.WithinLimit = hits
	if after > near {
		if before >= near {
			o.NearLimit = hits
		} else {
			o.NearLimit = after - near
		}
	}
}

// addHeaders adds the rate-limit headers of kind to resp, for the limit
// envoyproxy/ratelimit reports: the last over its limit, or else the one
// with the least left. Limits whose remaining count is unknown are not
// reported.
func addHeaders(kind Headers, resp *rlsv3.RateLimitResponse, ms []matched) {
	if kind != IETFHeaders && kind != EnvoyHeaders {
		return // NoHeaders, or ""
	}
	pick := -1
	for i, st := range resp.Statuses {
		if st.CurrentLimit == nil || st.DurationUntilReset == nil {
			continue
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT || pick < 0 ||
			resp.Statuses[pick].Code != rlsv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < resp.Statuses[pick].LimitRemaining {
			pick = i
		}
	}
	if pick < 0 {
		return
	}
	st := resp.Statuses[pick]
	limit := strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)
	remaining := strconv.FormatUint(uint64(st.LimitRemaining), 10)
	reset := strconv.FormatInt(st.DurationUntilReset.Seconds, 10)
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }
	switch kind {
	case EnvoyHeaders:
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			hv("RateLimit-Limit", limit), hv("RateLimit-Remaining", remaining), hv("RateLimit-Reset", reset),
		}
	case IETFHeaders:
		name := policyName(ms[pick].lim)
		window := strconv.FormatInt(int64(ms[pick].lim.Period/time.Second), 10)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			hv("RateLimit-Policy", name+";q="+limit+";w="+window),
			hv("RateLimit", name+";r="+remaining+";t="+reset),
		}
	}
}

// policyName is the quoted name of l in the IETF headers: its
// rate_limit.name, or "default" for a limit without one. A name is a
// structured-field string: printable ASCII, with '"' and '\' escaped; other
// bytes are dropped.
func policyName(l *Limit) string {
	name := l.Name
	if name == "" {
		name = "default"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// metadataOf is an answer's dynamic metadata, in envoyproxy/ratelimit's
// shape (RESPONSE_DYNAMIC_METADATA): the domain; the descriptors, each
// with its entries as "key=value", its limit override and its hits_addend
// when it has them; the request's hits_addend when set; quotaModeViolations,
// the places of the descriptors over a quota, when there are some; and
// quotaModeEnabled, whether any limit the request matched is a quota
// (allQuota: every limit is one).
func metadataOf(req *rlsv3.RateLimitRequest, quotas []int, ms []matched, allQuota bool) *structpb.Struct {
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			// The override as envoyproxy/ratelimit writes it: its
			// protobuf text, whose spacing protobuf does not promise.
			f["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	f := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: ds}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if len(quotas) > 0 {
		vs := make([]*structpb.Value, len(quotas))
		for i, at := range quotas {
			vs[i] = structpb.NewNumberValue(float64(at))
		}
		f["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	enabled := false
	for i := range ms {
		enabled = enabled || ms[i].lim != nil && !ms[i].lim.Unlimited && ms[i].lim.quota(allQuota)
	}
	f["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: f}
}
