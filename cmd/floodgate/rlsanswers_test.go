package main

import (
	"context"
	"syscall"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rls.shadow, rls.quota_mode, rls.response_metadata and
// rls.response_headers reach the running service.
func TestServeRLSAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, settings string
		quota          bool // every limit is a quota, named in the metadata
	}{
		{"shadow", "  shadow: true\n  response_headers: envoy\n", false},
		{"quota", "  quota_mode: true\n  response_metadata: true\n  response_headers: envoy\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, rlsAddr := serveRLSWith(t, tc.settings)
			c := rlsv3.NewRateLimitServiceClient(dialPlain(t, rlsAddr))
			for i := range 2 {
				resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
					{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "a"}}},
				}})
				if err != nil {
					t.Fatal(err)
				}
				h := map[string]string{}
				for _, v := range resp.ResponseHeadersToAdd {
					h[v.GetKey()] = v.GetValue()
				}
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || h["RateLimit-Limit"] != "1" || h["RateLimit-Remaining"] != "0" {
					t.Fatalf("request %d of 1 an hour, with %q: %v", i, tc.settings, resp)
				}
				md := resp.GetDynamicMetadata().GetFields()
				if !tc.quota {
					if md != nil {
						t.Fatalf("metadata without rls.response_metadata: %v", md)
					}
					continue
				}
				_, named := md["quotaModeViolations"]
				if !md["quotaModeEnabled"].GetBoolValue() || named != (i == 1) || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d of 1 an hour in quota mode: %v", i, resp)
				}
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != exitOK {
				t.Fatalf("exit %d after SIGTERM", code)
			}
		})
	}
}
