package main

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// tableLine matches a line of load's per-second table; the ninth group is
// what its other answers were, empty when it had none.
var tableLine = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([0-9.]+|-)\s+([0-9.]+|-)(?:  (\S.*))?$`)

func TestLoadAgainstUpstream(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	_, base := startMock(t, "--latency", "2ms")
	dir := t.TempDir()
	csvFile, htmlFile, attemptsFile := filepath.Join(dir, "x.csv"), filepath.Join(dir, "x.html"), filepath.Join(dir, "a.csv")

	stdout, stderr, code := floodgate(t, "load", "--url", base+"/api/receive", "--rate", "200", "--duration", "2s",
		"--users", "50", "--header", "X-Test: 1", "--out", csvFile, "--html", htmlFile, "--attempts", attemptsFile)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if !strings.Contains(stdout, "   t    sent     2xx     429     503   other       p50       p99  other was\n") {
		t.Errorf("no table header:\n%s", stdout)
	}
	lines := tableLine.FindAllStringSubmatch(stdout, -1)
	if len(lines) != 2 || lines[0][1] != "0" || lines[1][1] != "1" {
		t.Fatalf("want a line for seconds 0 and 1, got %q in:\n%s", lines, stdout)
	}
	for _, l := range lines {
		if l[2] != l[3] || (l[2] != "200" && l[2] != "199" && l[2] != "201") || l[7] == "-" || l[9] != "" {
			t.Errorf("line %q: want about 200 sent, all 2xx, and a p50", l[0])
		}
	}
	for _, want := range []string{
		"summary (complete", "400 scheduled, 400 sent (0 retries), 0 dropped",
		"2xx 400   429 0   503 0   other 0", "p99.9", "offered 200.0/s",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}

	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 3 || strings.Join(records[0][:8], ",") != "t,sent,2xx,429,503,other,p50_ms,p99_ms" {
		t.Errorf("CSV: want a header and 2 rows, got %q", records)
	}
	if page, err := os.ReadFile(htmlFile); err != nil || !strings.Contains(string(page), "<svg") {
		t.Errorf("HTML file: %v, %d bytes without a chart", err, len(page))
	}
	// One row per attempt, each answered 200 after the mock's 2 ms.
	b, err := os.ReadFile(attemptsFile)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil || len(attempts) != 401 || strings.Join(attempts[0], ",") != "t_ms,latency_ms,status,retry" {
		t.Fatalf("attempts file: %v, %d rows, want a header and 400 rows:\n%.300s", err, len(attempts), b)
	}
	for _, a := range attempts[1:] {
		at, err1 := strconv.ParseFloat(a[0], 64)
		lat, err2 := strconv.ParseFloat(a[1], 64)
		if err1 != nil || err2 != nil || at < 0 || at >= 2000 || lat < 2 || a[2] != "200" || a[3] != "0" {
			t.Errorf("attempt %q: want a send time within the 2 s run, 2 ms or more, 200, not a retry", a)
			break
		}
	}

	s := mockStats(t, base)
	if s["requests"] != 400.0 || s["status"].(map[string]any)["200"] != 400.0 {
		t.Errorf("the mock's /stats = %v, want 400 requests answered 200", s)
	}
}

// --poisson sends at random times: about the rate, not exactly it.
func TestLoadPoisson(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	_, base := startMock(t)
	stdout, stderr, code := floodgate(t, "load", "--url", base, "--rate", "200", "--duration", "2s", "--poisson", "--seed", "5")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if !strings.Contains(stdout, "const: 200/s for 2s, Poisson arrivals\n") {
		t.Errorf("the first line does not say Poisson arrivals:\n%s", stdout)
	}
	m := regexp.MustCompile(`(\d+) scheduled, (\d+) sent`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no summary:\n%s", stdout)
	}
	if n, _ := strconv.Atoi(m[1]); n < 320 || n > 480 || m[2] != m[1] {
		t.Errorf("%s scheduled, %s sent: want about 400 (within 4 standard deviations), sent as scheduled", m[1], m[2])
	}
}

// A surge against a mock with a capacity: the 503s of the overload show
// in the seconds they were sent in, and immediate retries add to them.
func TestLoadSurgeRetries(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	_, base := startMock(t, "--capacity", "100", "--overload-latency", "50ms")
	stdout, stderr, code := floodgate(t, "load", "--url", base, "--profile", "surge",
		"--from", "50", "--step-at", "1s", "--rate", "300", "--duration", "3s", "--retry", "immediate")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	lines := tableLine.FindAllStringSubmatch(stdout, -1)
	if len(lines) < 3 {
		t.Fatalf("want at least 3 lines:\n%s", stdout)
	}
	if lines[0][2] != "50" || lines[0][5] != "0" {
		t.Errorf("second 0 before the surge: %q, want 50 sent and no 503", lines[0][0])
	}
	if lines[1][5] == "0" {
		t.Errorf("second 1, the peak of 300 against a capacity of 100: %q, want 503s", lines[1][0])
	}
	if !regexp.MustCompile(`sent \(\d+ retries\)`).MatchString(stdout) || strings.Contains(stdout, "(0 retries)") {
		t.Errorf("no retries in the summary:\n%s", stdout)
	}
	if !strings.Contains(stdout, "answered 2xx in the end") {
		t.Errorf("no outcome line with retries:\n%s", stdout)
	}
}

func TestLoadInterrupted(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	_, base := startMock(t)
	var out syncBuffer
	cmd := exec.Command(floodgateBin, "load", "--url", base, "--rate", "20", "--duration", "1m")
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(waitTimeout)
	for !tableLine.MatchString(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no line within %v:\n%s", waitTimeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGINT: %v, want 0", err)
	}
	if !strings.Contains(out.String(), "summary (interrupted") {
		t.Errorf("no summary of the interrupted run:\n%s", out.String())
	}
}

func TestLoadNoAnswer(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := floodgate(t, "load", "--url", testnet.RefusedURL(t), "--rate", "10", "--duration", "300ms")
	if code != exitFailure || !strings.Contains(stderr, "no request got an answer") || !strings.Contains(stdout, "3 × connection refused") ||
		!strings.Contains(stdout, "  other      err:refused:3\n") {
		t.Errorf("against a closed port: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	if l := tableLine.FindStringSubmatch(stdout); l == nil || l[6] != "3" || l[9] != "err:refused:3" {
		t.Errorf("against a closed port: line %q, want other 3 and err:refused:3", l)
	}
}

// other is broken down by status in every report: the per-second line,
// the summary, the CSV and the HTML page.
func TestLoadOtherByStatus(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	_, base := startMock(t, "--status", "504")
	dir := t.TempDir()
	csvFile, htmlFile := filepath.Join(dir, "x.csv"), filepath.Join(dir, "x.html")
	stdout, stderr, code := floodgate(t, "load", "--url", base, "--rate", "20", "--duration", "1s",
		"--out", csvFile, "--html", htmlFile)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	lines := tableLine.FindAllStringSubmatch(stdout, -1)
	if len(lines) != 1 || lines[0][3] != "0" || lines[0][6] != "20" || lines[0][9] != "504:20" {
		t.Errorf("want one line of 20 other, all 504: %q in\n%s", lines, stdout)
	}
	if !strings.Contains(stdout, "other 20 (0 without an answer)\n  other      504:20\n") {
		t.Errorf("the summary does not say other was 504:\n%s", stdout)
	}
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 2 || records[0][len(records[0])-1] != "other_by" || records[1][5] != "20" || records[1][len(records[1])-1] != "504:20" {
		t.Errorf("CSV: want an other_by column of 504:20, got %q", records)
	}
	page, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"other (504)</span>", `<td class="by">504:20</td>`, "other      504:20"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the HTML page does not contain %q", want)
		}
	}
}

func TestLoadUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"load", "-h"}, {"help", "load"}} {
		stdout, _, code := floodgate(t, args...)
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: floodgate load --url URL") ||
			!strings.Contains(stdout, "-profile PROFILE") || !strings.Contains(stdout, "t sent 2xx 429 503 other p50 p99") {
			t.Errorf("%s: exit %d, stdout:\n%s", strings.Join(args, " "), code, stdout)
		}
	}
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{}, "--url is required"},
		{[]string{"--url", "http://x", "extra"}, `unexpected argument "extra"`},
		{[]string{"--url", "localhost:8080"}, `--url "localhost:8080": must be an absolute http:// or https:// URL`},
		{[]string{"--url", "http://x", "--profile", "zigzag"}, `--profile "zigzag": must be const, step or surge`},
		{[]string{"--url", "http://x", "--rate", "0", "--duration", "-1s"}, "--duration -1s: must be positive; --rate 0"},
		{[]string{"--url", "http://x", "--from", "10"}, "--from and --step-at apply to --profile step and surge"},
		{[]string{"--url", "http://x", "--profile", "step", "--plateau", "10"}, "--plateau applies to --profile surge"},
		{[]string{"--url", "http://x", "--profile", "surge", "--step-at", "30s"}, "--step-at 30s: must be after the start and before the end of the 20s run"},
		{[]string{"--url", "http://x", "--retry", "sometimes"}, `--retry "sometimes": must be none, immediate or backoff`},
		{[]string{"--url", "http://x", "--header", "no colon"}, `invalid value "no colon" for flag -header`},
		{[]string{"--url", "http://x", "--concurrency-cap", "0"}, "--concurrency-cap 0: must be positive"},
		{[]string{"--url", "http://x", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--url", "http://x", "--users", "-2"}, "--users -2: must not be negative"},
	}
	for _, tt := range tests {
		args := append([]string{"load", "--out", filepath.Join(dir, "never.csv")}, tt.args...)
		stdout, stderr, code := floodgate(t, args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "floodgate load -h") || stdout != "" {
			t.Errorf("floodgate %s: exit %d, stderr %q; want %d and %q", strings.Join(args, " "), code, stderr, exitUsage, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never.csv")); err == nil {
		t.Error("a run refused for bad usage created its --out file")
	}
	// A file that cannot be created is a failure before the run, not
	// after it.
	start := time.Now()
	_, stderr, code := floodgate(t, "load", "--url", "http://127.0.0.1:1", "--out", filepath.Join(dir, "no", "such", "dir.csv"))
	if code != exitFailure || !strings.Contains(stderr, "no such file or directory") || time.Since(start) > 5*time.Second {
		t.Errorf("--out in a missing directory: exit %d, stderr %q", code, stderr)
	}
}
