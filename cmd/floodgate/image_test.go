package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImage builds the container image from the repository's Dockerfile
// with the real docker, as make image does, and runs it on the host's
// network: version, check on a mounted config, and serve answering
// /healthz. It is the one test that may skip: where no Docker daemon
// answers, which make deps starts when it runs as root, and cannot in a
// container without privileges.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the container image; make check runs it")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed (make deps installs docker.io): the image is not built")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker daemon answers (%v: %s); make deps starts one as root: the image is not built", err, strings.TrimSpace(string(out)))
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-tags", makeTags(t), "-ldflags", "-s -w", "-o", filepath.Join(ctxDir, "floodgate"), "./cmd/floodgate")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	copyFile(t, "/etc/ssl/certs/ca-certificates.crt", filepath.Join(ctxDir, "ca-certificates.crt"))
	copyFile(t, filepath.Join(repo, "deploy/docker/floodgate.yaml"), filepath.Join(ctxDir, "floodgate.yaml"))

	var b [6]byte
	rand.Read(b[:])
	tag := "floodgate-test:" + hex.EncodeToString(b[:])
	docker(t, "build", "-q", "-t", tag, "-f", filepath.Join(repo, "Dockerfile"), ctxDir)
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })

	if out := docker(t, "run", "--rm", "--network", "host", tag, "version"); !strings.HasPrefix(out, "floodgate ") {
		t.Errorf("version printed %q", out)
	}
	user := docker(t, "image", "inspect", "--format", "{{.Config.User}}", tag)
	if strings.TrimSpace(user) != "65532:65532" {
		t.Errorf("the image runs as %q, want the non-root 65532:65532", user)
	}

	// A config folder mounted read-only, as a ConfigMap volume is.
	confDir := t.TempDir()
	gw, adm := freeAddr(t), freeAddr(t)
	conf := fmt.Sprintf(`server:
  listen: %q
admin:
  listen: %q
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits:
      - {name: per-ip, key: [ip], rate: 10/s}
`, gw, adm)
	if err := os.WriteFile(filepath.Join(confDir, "floodgate.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	mount := confDir + ":/etc/floodgate:ro"
	if out := docker(t, "run", "--rm", "--network", "host", "-v", mount, tag, "check", "-c", "/etc/floodgate/floodgate.yaml"); !strings.Contains(out, "ok: 1 route") {
		t.Errorf("check printed %q", out)
	}

	name := strings.ReplaceAll(tag, ":", "-")
	docker(t, "run", "-d", "--name", name, "--network", "host", "-v", mount, tag)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + adm + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Fatalf("serve in the container never answered /healthz on %s (last error %v); its log:\n%s", adm, err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://" + gw + "/api/x")
	if err != nil {
		t.Fatalf("the gateway in the container: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a request to a dead upstream got %d, want 502", resp.StatusCode)
	}
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
