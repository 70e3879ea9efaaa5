package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
	"github.com/floodgate-gw/floodgate/internal/wantlines"
)

// Every YAML example of the configuration reference parses: a whole file
// as it is, a block without routes beside a route, a list of limits as a
// route's limits.
func TestDocsExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FLOODGATE_ADMIN_TOKEN", "docs-token")
	t.Setenv("REDIS_PASSWORD", "docs-password")
	t.Setenv("FLOODGATE_TOKEN_ALICE", "docs-alice")
	t.Setenv("FLOODGATE_TOKEN_DEPLOY", "docs-deploy")
	t.Setenv("KAFKA_PASSWORD", "docs-kafka")
	// The rls.tls example names files that check reads.
	certs := t.TempDir()
	ca := testcerts.NewCA(t, "docs CA")
	pair := ca.Server(t, "docs")
	testcerts.Write(t, certs, "tls.crt", pair.CertPEM)
	testcerts.Write(t, certs, "tls.key", pair.KeyPEM)
	testcerts.Write(t, certs, "envoy-ca.crt", ca.PEM)
	testcerts.Write(t, certs, "xds-ca.crt", ca.PEM)
	// So does the upstream.tls example.
	upstreamCerts := t.TempDir()
	client := ca.Client(t, "docs gateway")
	testcerts.Write(t, upstreamCerts, "internal-ca.crt", ca.PEM)
	testcerts.Write(t, upstreamCerts, "gateway.crt", client.CertPEM)
	testcerts.Write(t, upstreamCerts, "gateway.key", client.KeyPEM)
	// And the events.kafka.tls example.
	kafkaCerts := t.TempDir()
	testcerts.Write(t, kafkaCerts, "kafka-ca.crt", ca.PEM)
	testcerts.Write(t, kafkaCerts, "gateway.crt", client.CertPEM)
	testcerts.Write(t, kafkaCerts, "gateway.key", client.KeyPEM)
	blocks := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 10 {
		t.Fatalf("%d YAML examples in docs/configuration.md", len(blocks))
	}
	for _, b := range blocks {
		src := strings.ReplaceAll(b[1], "/etc/floodgate/rls/", certs+"/")
		src = strings.ReplaceAll(src, "/etc/floodgate/upstream/", upstreamCerts+"/")
		src = strings.ReplaceAll(src, "/etc/floodgate/kafka/", kafkaCerts+"/")
		first := strings.SplitN(src, "\n", 2)[0]
		switch {
		case strings.HasPrefix(first, "- "):
			src = "routes:\n  - id: docs\n    match: {path: /docs}\n    upstream: {targets: [\"http://127.0.0.1:9000\"]}\n    limits:\n" +
				regexp.MustCompile("(?m)^").ReplaceAllString(strings.TrimRight(src, "\n"), "      ") + "\n"
		case !regexp.MustCompile(`(?m)^routes:`).MatchString(src):
			src += okRoute
		}
		if _, err := Parse("example.yaml", []byte(src)); err != nil {
			t.Errorf("the example that starts %q does not parse:\n%v\n%s", first, err, wantlines.Numbered(src))
		}
	}
}
