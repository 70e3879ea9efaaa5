package rlsserver

import (
	"slices"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// A response that is not RateLimitConfigs is refused whole, naming the
// resource at fault; a good one beside it does not make it through.
func TestDecodeXDSRefusesGarbage(t *testing.T) {
	t.Parallel()
	good, err := anypb.New(&rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := anypb.New(&discoveryv3.DiscoveryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		resp *discoveryv3.DiscoveryResponse
		want string
	}{
		{"bytes that do not decode", &discoveryv3.DiscoveryResponse{TypeUrl: ConfigType, Resources: []*anypb.Any{
			good, {TypeUrl: ConfigType, Value: []byte{0xff, 0xff, 0xff}}}},
			"resource 1: not a RateLimitConfig"},
		{"a resource of another type", &discoveryv3.DiscoveryResponse{TypeUrl: ConfigType, Resources: []*anypb.Any{other, good}},
			`resource 0: of type "type.googleapis.com/envoy.service.discovery.v3.DiscoveryRequest", not a RateLimitConfig`},
		{"a response of another type", &discoveryv3.DiscoveryResponse{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Resources: []*anypb.Any{good}},
			"the service subscribes to " + ConfigType + " only"},
		{"a domain twice", &discoveryv3.DiscoveryResponse{TypeUrl: ConfigType, Resources: []*anypb.Any{good, good}},
			`domain "edge" is already defined in edge`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeXDS(tc.resp)
			if err == nil || r != nil {
				t.Fatalf("accepted: %v", r)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to hold %q", err, tc.want)
			}
		})
	}
	r, err := decodeXDS(&discoveryv3.DiscoveryResponse{TypeUrl: ConfigType, Resources: []*anypb.Any{good}})
	if err != nil || !slices.Equal(r.Domains(), []string{"edge"}) {
		t.Fatalf("a good response: %v, %v", r, err)
	}
}
