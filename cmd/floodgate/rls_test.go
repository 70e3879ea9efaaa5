package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rlsConfig serves only the rate-limit service, with rules in rules/.
const rlsConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
rls:
  listen: "{{RLS}}"
  config_dir: "{{RULES}}"
`

func rlsRules(n int) string {
	return "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: " + strings.Repeat("1", n) + "}\n"
}

// floodgate serve answers Envoy's ShouldRateLimit on rls.listen, and its
// rules reload when their files change; a file that does not load is
// refused and the running rules stay.
func TestServeRLS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	rlsAddr, rules := freeAddr(t), filepath.Join(f.dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRules := func(text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeRules(rlsRules(1)) // 1 an hour
	f.write(strings.NewReplacer("{{RLS}}", rlsAddr, "{{RULES}}", rules).Replace(rlsConfig))
	check := startProc(t, "check", "-c", f.file)
	if code := check.wait(); code != exitOK {
		t.Fatalf("check exited %d", code)
	}
	p := f.serve()

	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(addr string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
			{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if ask("a") != rlsv3.RateLimitResponse_OK || ask("a") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("1 an hour did not admit one and refuse the next")
	}

	// 11 an hour: the counter of "a" stays (1 used), 10 more fit.
	writeRules(rlsRules(2))
	p.waitLog(`rate-limit rules reloaded`)
	for i := range 10 {
		if ask("a") != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d under the reloaded limit refused", i)
		}
	}
	if ask("a") != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the 12th request under 11 an hour admitted")
	}

	writeRules("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	p.waitLog(`rate-limit rules refused.*edge.yaml:4`)
	// Under the running 11 an hour, a new address gets 11 requests.
	for i := range 11 {
		if ask("b") != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d refused: the refused rules replaced the running ones", i)
		}
	}
	// /readyz says so, and stays 200: the service decides by the running
	// rules. Rules that load clear it.
	detail := p.readyzDetail
	if d := detail(); !strings.Contains(d, "rls.config_dir: rules refused") || !strings.Contains(d, "edge.yaml:4") {
		t.Errorf("/readyz detail %q after refused rules", d)
	}
	writeRules(rlsRules(2))
	p.waitLog(`rate-limit rules reloaded`)
	p.waitFor("/readyz detail to clear", func() bool { return detail() == "" })

	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != exitOK {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// A config that serves only the rate-limit service, with server.listen
// empty, opens no gateway listener.
func TestServeRLSOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	rlsAddr, rules := freeAddr(t), filepath.Join(f.dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(rlsRules(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(strings.NewReplacer(`listen: "{{LISTEN}}"`, `listen: ""`, "{{RLS}}", rlsAddr, "{{RULES}}", rules).Replace(rlsConfig))
	p := f.serve()
	p.waitLog(`"msg":"floodgate serving".*"listen":"","admin"`)
}
