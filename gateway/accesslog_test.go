package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/accesslog"
	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// accessLine is one line of the access log.
type accessLine struct {
	Time             string   `json:"time"`
	Level            string   `json:"level"`
	Msg              string   `json:"msg"`
	RequestID        string   `json:"request_id"`
	ClientIP         string   `json:"client_ip"`
	Method           string   `json:"method"`
	Protocol         string   `json:"protocol"`
	Path             string   `json:"path"`
	Route            *string  `json:"route"`
	Status           int      `json:"status"`
	Duration         float64  `json:"duration"`
	Bytes            *int64   `json:"bytes"`
	Outcome          string   `json:"outcome"`
	Limit            string   `json:"limit"`
	Upstream         string   `json:"upstream"`
	UpstreamDuration *float64 `json:"upstream_duration"`
	Error            string   `json:"error"`
	GRPCStatus       *int     `json:"grpc_status"`
}

// readAccess waits until file holds n lines and returns them, each
// checked to be one JSON object.
func readAccess(t *testing.T, file string, n int) []accessLine {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(file)
		lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		if len(data) == 0 {
			lines = nil
		}
		if len(lines) >= n || time.Now().After(deadline) {
			if len(lines) != n {
				t.Fatalf("%s holds %d lines, want %d:\n%s", file, len(lines), n, data)
			}
			out := make([]accessLine, n)
			for i, l := range lines {
				dec := json.NewDecoder(strings.NewReader(l))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&out[i]); err != nil {
					t.Fatalf("line %d is not an access log line: %v\n%s", i+1, err, l)
				}
			}
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	deadURL := testnet.RefusedURL(t)
	file := filepath.Join(t.TempDir(), "access.log")
	h := newHarness(t, `
admin: {listen: ""}
server: {access_log: `+file+`}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 1/1h}
  - id: dead
    match: {path: /dead}
    upstream: {targets: ["`+deadURL+`"]}
  - id: br
    match: {path: /br}
    upstream: {targets: ["{{UP}}"]}
    breaker: {enabled: true}
`, up)
	if err := h.gw.ForceBreaker("br", "open", 0); err != nil {
		t.Fatal(err)
	}
	sent := 0
	send := func(path, user string) {
		t.Helper()
		sent++
		hdr := map[string]string{"X-Request-Id": "rid-" + strconv.Itoa(sent)}
		if user != "" {
			hdr["X-User-Id"] = user
		}
		resp := h.do("GET", path, hdr, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send("/api/a", "u1")     // admitted
	send("/api/b", "u1")     // limited
	send("/api/c", "")       // key_required
	send("/nowhere", "")     // not_found
	send("/api/a%2Fb", "u2") // bad_request
	send("/dead", "")        // admitted, the upstream refuses
	send("/br", "")          // breaker
	lines := readAccess(t, file, 7)

	str := func(s string) *string { return &s }
	for i, want := range []struct {
		path     string
		route    *string
		status   int
		outcome  string
		limit    string
		upstream string
		err      string
	}{
		{"/api/a", str("api"), 200, "admitted", "", up.URL, ""},
		{"/api/b", str("api"), 429, "limited", "user", "", ""},
		{"/api/c", str("api"), 403, "key_required", "", "", ""},
		{"/nowhere", nil, 404, "not_found", "", "", ""},
		{"/api/a%2Fb", nil, 400, "bad_request", "", "", ""},
		{"/dead", str("dead"), 502, "admitted", "", deadURL, "connection_refused"},
		{"/br", str("br"), 503, "breaker", "", "", ""},
	} {
		l := lines[i]
		if l.Path != want.path || (l.Route == nil) != (want.route == nil) || l.Route != nil && *l.Route != *want.route ||
			l.Status != want.status || l.Outcome != want.outcome || l.Limit != want.limit ||
			l.Upstream != want.upstream || l.Error != want.err {
			t.Errorf("line %d: %+v\nwant %+v", i+1, l, want)
		}
		if l.Level != "INFO" || l.Msg != "access" || l.Method != "GET" || l.Protocol != "HTTP/1.1" || l.ClientIP != "127.0.0.1" ||
			l.RequestID != "rid-"+strconv.Itoa(i+1) || l.Duration <= 0 {
			t.Errorf("line %d: %+v", i+1, l)
		}
		if ts, err := time.Parse(time.RFC3339Nano, l.Time); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("line %d: time %q: %v", i+1, l.Time, err)
		}
		if (l.UpstreamDuration != nil) != (want.upstream != "") {
			t.Errorf("line %d: upstream_duration %v, want one only when the upstream was asked", i+1, l.UpstreamDuration)
		}
		if l.Bytes == nil {
			t.Errorf("line %d: no bytes", i+1)
		}
	}
	if b := lines[0].Bytes; b == nil || *b != 5 {
		t.Errorf("bytes of the upstream's answer: %v, want 5", b)
	}
	// The gateway's own answers: their JSON bodies' length.
	body := h.gw.gen.Load().notFound.Body("rid-4", "")
	if b := lines[3].Bytes; b == nil || *b != int64(len(body)) {
		t.Errorf("bytes of the 404: %v, want %d", b, len(body))
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		t.Errorf("the access log was created %v; want no more than 0640", perm)
	}
}

// The file is opened again at every reload, so that logrotate's rename
// and SIGHUP (which reloads an unchanged file) moves the log to a new
// file; a reload to a file that cannot be opened is refused at its line.
func TestAccessLogReopen(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "access.log")
	yaml := func(file string) string {
		return `
admin: {listen: ""}
server:
  access_log: ` + file + `
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["` + up.URL + `"]}
`
	}
	h := newHarness(t, yaml(file), up)
	get := func(path string) {
		t.Helper()
		resp := h.do("GET", path, nil, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get("/api/1")
	readAccess(t, file, 1)
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	get("/api/2") // still to the renamed file
	readAccess(t, file+".1", 2)
	h.gw.ReloadUnchanged()
	get("/api/3")
	if l := readAccess(t, file, 1); l[0].Path != "/api/3" {
		t.Errorf("after the reload: %+v", l[0])
	}

	other := filepath.Join(dir, "other.log")
	if err := h.gw.Reload(mustParseT(t, yaml(other))); err != nil {
		t.Fatal(err)
	}
	get("/api/4")
	if l := readAccess(t, other, 1); l[0].Path != "/api/4" {
		t.Errorf("after the reload to another file: %+v", l[0])
	}
	readAccess(t, file, 1)

	gone := filepath.Join(dir, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := mustParseT(t, yaml(filepath.Join(gone, "access.log")))
	os.Remove(gone)
	err := h.gw.Reload(cfg)
	var errs config.Errors
	if err == nil || !strings.Contains(err.Error(), "test.yaml:4: server.access_log: cannot open: open "+gone) || !errorsAs(err, &errs) {
		t.Fatalf("reload to a file in a removed directory: %v, want a config error at line 4", err)
	}
	get("/api/5")
	if l := readAccess(t, other, 2); l[1].Path != "/api/5" {
		t.Errorf("after the refused reload: %+v", l[1])
	}
	// Off, then the file again.
	if err := h.gw.Reload(mustParseT(t, yaml("off"))); err != nil {
		t.Fatal(err)
	}
	get("/api/6")
	if err := h.gw.Reload(mustParseT(t, yaml(other))); err != nil {
		t.Fatal(err)
	}
	get("/api/7")
	if l := readAccess(t, other, 3); l[2].Path != "/api/7" {
		t.Errorf("after off and on again: %+v", l[2])
	}
}

// "stderr" writes to the gateway's Stderr, one whole line per request
// beside the log's own lines.
func TestAccessLogStderr(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	cfg := mustParseT(t, `
admin: {listen: ""}
server: {access_log: stderr}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["`+up.URL+`"]}
`)
	var stderr syncWriter
	stderr.b = &strings.Builder{}
	gw, err := New(cfg, Options{Logger: discardLogger(), Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	defer gw.Close()
	resp, err := srv.Client().Get(srv.URL + "/api/x?secret=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stderr.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var l accessLine
	if err := json.Unmarshal([]byte(stderr.String()), &l); err != nil || l.Path != "/api/x" || l.Status != 200 || l.Outcome != "admitted" {
		t.Errorf("stderr %q: %+v %v", stderr.String(), l, err)
	}
	if strings.Contains(stderr.String(), "secret") {
		t.Errorf("the access log holds the query: %s", stderr.String())
	}
}

// "stdout" writes to the gateway's Stdout, not to a file named stdout.
func TestAccessLogStdout(t *testing.T) {
	up := newBackend(t, nil)
	cfg := mustParseT(t, `
admin: {listen: ""}
server: {access_log: stdout}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["`+up.URL+`"]}
`)
	var stdout, stderr syncWriter
	stdout.b, stderr.b = &strings.Builder{}, &strings.Builder{}
	t.Chdir(t.TempDir())
	gw, err := New(cfg, Options{Logger: discardLogger(), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	defer gw.Close()
	resp, err := srv.Client().Get(srv.URL + "/api/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stdout.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var l accessLine
	if err := json.Unmarshal([]byte(stdout.String()), &l); err != nil || l.Path != "/api/x" || l.Outcome != "admitted" {
		t.Errorf("stdout %q: %+v %v", stdout.String(), l, err)
	}
	if stderr.String() != "" {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
	if _, err := os.Stat("stdout"); err == nil {
		t.Error("a file named stdout was created")
	}
}

// Every line's path is cut at accesslog.MaxPath, an admitted request's too.
func TestAccessLogLongPath(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	file := filepath.Join(t.TempDir(), "access.log")
	h := newHarness(t, `
admin: {listen: ""}
server: {access_log: `+file+`}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
	long := "/api/" + strings.Repeat("a", 2*accesslog.MaxPath)
	resp := h.do("GET", long, nil, nil)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	l := readAccess(t, file, 1)[0]
	if l.Outcome != "admitted" || l.Path != long[:accesslog.MaxPath] {
		t.Errorf("%s, %d bytes of path; want admitted, the first %d bytes", l.Outcome, len(l.Path), accesslog.MaxPath)
	}
}

func errorsAs(err error, target *config.Errors) bool {
	e, ok := err.(config.Errors)
	if ok {
		*target = e
	}
	return ok
}
