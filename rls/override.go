package rls

import (
	"fmt"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/limit"
)

// override is the limit of a descriptor that carries its own
// (RateLimitDescriptor.limit, set by Envoy's rate-limit action
// limit.dynamic_metadata), in a domain of the rules: as in
// envoyproxy/ratelimit, it applies whatever rule the descriptor matches,
// unlimited included, and has no name, shadow_mode or replaces. An unknown
// domain matches nothing, override or not.
//
// Its counters are its own, apart from any rule's: named by the domain
// and the unit alone, so that the same descriptor sent with another
// requests_per_unit and the same unit keeps its count, as a rule keeps it
// when a reload changes its rate. (envoyproxy/ratelimit keys its counters
// by descriptor and window only, so there an override shares the count of
// a rule of the same unit.)
//
// quota makes it a quota, for a service in quota mode.
func override(domain string, o *rlsv3ext.RateLimitDescriptor_RateLimitOverride, quota bool) (*Limit, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	lim := &Limit{Unit: unit, RequestsPerUnit: o.GetRequestsPerUnit()}
	for _, u := range units {
		if u.unit == unit {
			lim.Period = u.period
		}
	}
	if lim.Period == 0 {
		return nil, fmt.Errorf("limit override: unit %v is not one of %s", unit, unitList)
	}
	// envoyproxy/ratelimit ignores unit_multiplier; counting a window of
	// one unit when the sender asked for several would admit more than it
	// meant, so it is refused.
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() != 1 {
		return nil, fmt.Errorf("limit override: unit_multiplier %d is not supported", m.GetValue())
	}
	if lim.RequestsPerUnit == 0 {
		return lim, nil // rejects every request, as a rule of 0 does
	}
	lim.Rule = &limit.Rule{
		Name:      ruleName(domain, []Level{{Key: "", Value: "limit override per " + unit.String()}}),
		Algorithm: limit.FixedWindow,
		Align:     limit.AlignEpoch,
		Rate:      limit.Rate{Count: int64(lim.RequestsPerUnit), Period: lim.Period},
	}
	lim.QuotaMode = quota
	if err := lim.Rule.Validate(); err != nil {
		return nil, fmt.Errorf("limit override: %w", err)
	}
	if quota {
		// Rule becomes a shadow rule, and is its own quotaRule.
		if err := lim.setQuotaRule(); err != nil {
			return nil, fmt.Errorf("limit override: %w", err)
		}
	}
	return lim, nil
}
