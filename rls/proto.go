package rls

import (
	"fmt"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
)

// FromConfigs builds Rules from RateLimitConfig resources, as a management
// server sends them over xDS, held to the same checks as a rule file: each
// config is one file, named after its resource name (the domain when it has
// none), and its problems are reported by path, at line 0. The same domain
// in two configs is an error, as in two files. On any error it returns nil
// Rules; the error is a config.Errors, as LoadDir's.
//
// The message has fewer fields than a rule file: share_threshold,
// quota_mode, value_to_metric and metadata cannot be sent, and a unit of
// week, month or year has no value of RateLimitUnit.
func FromConfigs(cfgs []*rlsconfv3.RateLimitConfig) (*Rules, error) {
	var (
		files []*file
		errs  yamlnode.Errors
		first = map[string]string{} // domain → the config that defined it
	)
	for _, cfg := range cfgs {
		name := cfg.GetName()
		if name == "" {
			name = cfg.GetDomain()
		}
		rf := ruleFile{Domain: cfg.GetDomain(), Descriptors: protoDescriptors(cfg.GetDescriptors())}
		c := &checker{file: name}
		f := &file{domain: rf.Domain, root: c.check(&rf)}
		f.errs = c.errs
		if f.domain != "" {
			if prev, dup := first[f.domain]; dup {
				f.errs = append(f.errs, yamlnode.Error{File: name, Msg: fmt.Sprintf("domain %q is already defined in %s", f.domain, prev)})
			} else {
				first[f.domain] = name
			}
		}
		errs = append(errs, f.errs...)
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return build(files), nil
}

func protoDescriptors(list []*rlsconfv3.RateLimitDescriptor) []descriptor {
	if list == nil {
		return nil
	}
	out := make([]descriptor, len(list))
	for i, d := range list {
		out[i] = descriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      protoRateLimit(d.GetRateLimit()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			Descriptors:    protoDescriptors(d.GetDescriptors()),
		}
	}
	return out
}

// protoRateLimit gives a policy as a rule file writes it. A proto3 field
// has no presence: UNKNOWN reads as a unit left out, and a count of 0 as
// left out only beside unlimited, where a rule file may not give one;
// elsewhere 0 is a limit that rejects every request, as in a rule file.
func protoRateLimit(p *rlsconfv3.RateLimitPolicy) *rateLimit {
	if p == nil {
		return nil
	}
	rl := &rateLimit{Name: p.GetName(), Unlimited: p.GetUnlimited()}
	switch u := p.GetUnit(); {
	case u == rlsconfv3.RateLimitUnit_UNKNOWN:
	case rlsconfv3.RateLimitUnit_name[int32(u)] != "":
		rl.Unit = u.String()
	default:
		// A number the enum does not name: refused as an unknown unit.
		rl.Unit = strconv.Itoa(int(u))
	}
	if n := int64(p.GetRequestsPerUnit()); n != 0 || !rl.Unlimited {
		rl.RequestsPerUnit = &n
	}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, replace{Name: r.GetName()})
	}
	return rl
}
