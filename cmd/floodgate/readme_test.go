package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/needs"
)

// The README's walk-through, as a reader runs it: the fenced blocks that
// follow a "<!-- walkthrough: terminal N -->" comment, run from a directory
// laid out like a clone's root, with floodgate on PATH (the binary TestMain
// built once). What the README says you should see is what the test checks.
//
// The README's addresses are used when they are free. When one of them is
// taken (another run of this test, a service of the machine's), the test
// moves all three to free ports, in the commands and in the example it
// runs alike: the commands are the README's, the ports are not.

// walkthroughMarker starts a block of the walk-through in README.md.
var walkthroughMarker = regexp.MustCompile(`^<!-- walkthrough: terminal (\d+) -->$`)

// The walk-through's addresses, as the README and flash-sale.yaml write
// them: the gateway, the mock API, the admin listener.
var walkthroughAddrs = []string{"127.0.0.1:8080", "127.0.0.1:9000", "127.0.0.1:9090"}

// The load runs 20 s in the README; 8 s holds the surge at 5 s and its
// fall. Its peak is halved: the test shares two cores with the tests of
// other packages, and the surge must still be several times the api
// limit's 400/s, so that both limits refuse.
const (
	readmeDuration = "--duration 20s"
	testDuration   = "--duration 8s"
	readmeRate     = "--rate 2000"
	testRate       = "--rate 1000"
)

// A walkthroughBlock is one fenced block of the walk-through: the terminal
// it is typed in and its commands, each with its continuation lines joined.
type walkthroughBlock struct {
	terminal int
	commands []string
}

// readWalkthrough returns the walk-through's blocks in the order of the
// README. A marker must be followed by a fenced sh block.
func readWalkthrough(readme string) ([]walkthroughBlock, error) {
	var blocks []walkthroughBlock
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		m := walkthroughMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			return nil, fmt.Errorf("README.md:%d: a walk-through marker not followed by a ```sh block", i+1)
		}
		b := walkthroughBlock{terminal: n}
		cmd := ""
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			line := lines[j]
			if strings.HasSuffix(line, "\\") {
				cmd += strings.TrimSuffix(line, "\\")
				continue
			}
			if cmd += line; strings.TrimSpace(cmd) != "" {
				b.commands = append(b.commands, cmd)
			}
			cmd = ""
		}
		if j == len(lines) || cmd != "" || len(b.commands) == 0 {
			return nil, fmt.Errorf("README.md:%d: the walk-through block does not end, or is empty", i+1)
		}
		blocks = append(blocks, b)
		i = j
	}
	return blocks, nil
}

func TestReadWalkthrough(t *testing.T) {
	t.Parallel()
	readme := "intro\n<!-- walkthrough: terminal 2 -->\n```sh\nfloodgate check \\\n    -c x.yaml\n\nfloodgate serve -c x.yaml\n```\n" +
		"```sh\nnot this\n```\n<!-- walkthrough: terminal 3 -->\n```sh\nA=$(b) # c\ncurl $A\n```\n"
	blocks, err := readWalkthrough(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := []walkthroughBlock{
		{2, []string{"floodgate check     -c x.yaml", "floodgate serve -c x.yaml"}},
		{3, []string{"A=$(b) # c", "curl $A"}},
	}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Errorf("blocks %v, want %v", blocks, want)
	}
	for _, bad := range []string{
		"<!-- walkthrough: terminal 1 -->\nfloodgate serve\n",
		"<!-- walkthrough: terminal 1 -->\n```sh\nfloodgate serve\n",
		"<!-- walkthrough: terminal 1 -->\n```sh\nfloodgate serve \\\n```\n",
		"<!-- walkthrough: terminal 1 -->\n```sh\n```\n",
	} {
		if _, err := readWalkthrough(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The walk-through runs alone in this package (not in parallel): its load
// measures what one machine can do, and the other tests would take cores
// from it.
func TestReadmeWalkthrough(t *testing.T) {
	skipWithoutSignals(t)
	if testing.Short() {
		t.Skip("runs the README's 8-second load")
	}
	needs.Program(t, "bash", "bash")
	needs.Program(t, "curl", "curl")
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readWalkthrough(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var terminal [4][]walkthroughBlock
	for _, b := range blocks {
		if b.terminal < 1 || b.terminal > 3 {
			t.Fatalf("a block for terminal %d: the walk-through has three", b.terminal)
		}
		terminal[b.terminal] = append(terminal[b.terminal], b)
	}
	if len(terminal[1]) != 1 || len(terminal[2]) != 1 || len(terminal[3]) != 2 {
		t.Fatalf("want one block for terminals 1 and 2 and two for terminal 3, got %v", blocks)
	}

	// Each address the README's, or else every one of them a free one.
	addrs := map[string]string{}
	for _, a := range walkthroughAddrs {
		addrs[a] = a
	}
	for _, a := range walkthroughAddrs {
		if l, err := net.Listen("tcp", a); err != nil {
			t.Logf("%s is taken (%v): the walk-through runs on free ports", a, err)
			for _, a := range walkthroughAddrs {
				addrs[a] = freeAddr(t)
			}
			break
		} else {
			l.Close()
		}
	}
	rewrite := func(s string) string {
		for from, to := range addrs {
			s = strings.ReplaceAll(s, from, to)
		}
		return s
	}
	gatewayAddr, mockAddr, adminAddr := addrs[walkthroughAddrs[0]], addrs[walkthroughAddrs[1]], addrs[walkthroughAddrs[2]]

	// A clone's root, as far as the walk-through reads it: the example
	// (its addresses as the test runs it) and the key pair it names. What
	// the run writes (surge.html, the breaker's event file) stays here.
	dir := t.TempDir()
	example, err := os.ReadFile("../../examples/flash-sale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jwtDir, err := filepath.Abs("../../examples/jwt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "examples", "flash-sale.yaml"), []byte(rewrite(string(example))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(jwtDir, filepath.Join(dir, "examples", "jwt")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(floodgateBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	shell := func(script string) *exec.Cmd {
		cmd := exec.Command("bash", "-e", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		return cmd
	}
	// run runs a command of the walk-through to its end.
	run := func(script string) (stdout, stderr string) {
		t.Helper()
		var out, errOut syncBuffer
		cmd := shell(script)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	// start runs a command that runs until Ctrl-C, in the background.
	start := func(script string) *proc {
		t.Helper()
		p := &proc{t: t, stderr: &syncBuffer{}, done: make(chan struct{})}
		// exec: the signals go to floodgate, not to the shell.
		p.cmd = shell("exec " + script)
		p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := p.cmd.Wait(); err != nil {
				p.code = -1
				if ee, ok := err.(*exec.ExitError); ok {
					p.code = ee.ExitCode()
				}
			}
			close(p.done)
		}()
		t.Cleanup(func() {
			select {
			case <-p.done:
			default:
				p.cmd.Process.Kill()
				<-p.done
			}
			if t.Failed() {
				t.Logf("%s\noutput:\n%s", script, p.stderr)
			}
		})
		return p
	}
	// longRunning reports whether a command runs until Ctrl-C.
	longRunning := func(cmd string) bool {
		return strings.HasPrefix(cmd, "floodgate upstream ") || strings.HasPrefix(cmd, "floodgate serve ")
	}

	// Terminal 1: the mock coupon API.
	t1 := terminal[1][0].commands
	if len(t1) != 1 || !longRunning(t1[0]) || !strings.Contains(t1[0], "--listen 127.0.0.1:9000") {
		t.Fatalf("terminal 1: want the mock API on 127.0.0.1:9000, got %q", t1)
	}
	mock := start(rewrite(t1[0]))
	mock.waitLog(regexp.QuoteMeta("floodgate upstream: listening on http://" + mockAddr + "\n"))

	// Terminal 2: check, then serve.
	var gw *proc
	for _, c := range terminal[2][0].commands {
		c = rewrite(c)
		if longRunning(c) {
			gw = start(c)
			continue
		}
		stdout, stderr := run(c)
		if strings.HasPrefix(c, "floodgate check ") {
			want := "examples/flash-sale.yaml: ok: 1 route, 4 limits, store memory, admin " + adminAddr + "\n"
			if stdout != want || stderr != "" {
				t.Errorf("%s: stdout %q, stderr %q; want %q", c, stdout, stderr, want)
			}
		}
	}
	if gw == nil {
		t.Fatalf("terminal 2 does not start floodgate serve: %q", terminal[2][0].commands)
	}
	serving := gw.waitLog(`\{[^\n]*"msg":"floodgate serving"[^\n]*\}`)
	for _, want := range []string{`"listen":"` + gatewayAddr + `"`, `"admin":"` + adminAddr + `"`} {
		if !strings.Contains(serving, want) {
			t.Errorf("serve logged %s, without %s", serving, want)
		}
	}
	gw.waitFor("the gateway's /healthz", func() bool {
		resp, err := client.Get("http://" + adminAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// Terminal 3: the load, shortened.
	load := strings.Join(terminal[3][0].commands, "\n")
	for _, want := range []string{readmeDuration, readmeRate} {
		if !strings.Contains(load, want) {
			t.Fatalf("the load does not say %q, which the test changes: %s", want, load)
		}
	}
	load = strings.Replace(load, readmeDuration, testDuration, 1)
	stdout, _ := run(rewrite(strings.Replace(load, readmeRate, testRate, 1)))
	checkWalkthroughLoad(t, stdout)
	checkWalkthroughProtect(t, adminAddr)
	if page, err := os.ReadFile(filepath.Join(dir, "surge.html")); err != nil || !strings.Contains(string(page), "<svg") {
		t.Errorf("surge.html: %v, %d bytes without a chart", err, len(page))
	}

	// Terminal 3: one user, twice. The user limit's windows start at
	// multiples of 10 s, and two tries that straddle one are both
	// admitted, as the README says: start well inside a window.
	if left := 10*time.Second - time.Duration(time.Now().UnixNano())%(10*time.Second); left < 3*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	started := time.Now()
	stdout, _ = run(rewrite(strings.Join(terminal[3][1].commands, "\n")))
	if started.Unix()/10 != time.Now().Unix()/10 {
		t.Fatalf("the two tries straddled a 10-second window (%v): run again", time.Since(started))
	}
	first, second, _ := strings.Cut(stdout, "\n")
	if first != "ok" || !strings.HasPrefix(second, "HTTP/1.1 429 Too Many Requests\r\n") ||
		!strings.Contains(second, "\r\nRetry-After: ") || !strings.Contains(second, "\r\nRatelimit: \"user\";r=0;t=") ||
		!strings.Contains(second, `{"code":"repeat_apply","message":"You have already taken part",`) {
		t.Errorf("the two tries: want ok, then 429 repeat_apply; got\n%s", stdout)
	}

	// Ctrl-C in terminals 2 and 1.
	gw.signal(syscall.SIGINT)
	if code := gw.wait(); code != exitOK || !strings.Contains(gw.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("serve after Ctrl-C: exit %d", code)
	}
	mock.signal(syscall.SIGINT)
	if code := mock.wait(); code != exitOK {
		t.Errorf("the mock after Ctrl-C: exit %d", code)
	}
	checkWalkthroughMock(t, mock.stderr.String())
}

// summaryAnswers matches the answers line of load's summary.
var summaryAnswers = regexp.MustCompile(`(?m)^  answers    2xx (\d+)   429 (\d+)   503 (\d+)   other (\d+) `)

// checkWalkthroughLoad checks the load's output against the README: a
// line a second, 2xx before and through the surge, the rest 429, and no
// 503. The README says "other" is 0, and why it may not be on a machine
// whose cores the load, the gateway and the API share: the gateway missing
// a timeout while it waits for a core. What the limits guarantee, that the
// API is never asked for more than it serves, checkWalkthroughMock checks
// exactly; here a few answers of a starved machine (at most 1 in 200
// attempts) are logged, not failed, so that CI on a busy machine tests the
// walk-through rather than its cores.
func checkWalkthroughLoad(t *testing.T, stdout string) {
	t.Helper()
	lines := tableLine.FindAllStringSubmatch(stdout, -1)
	if len(lines) < 8 || lines[0][1] != "0" {
		t.Fatalf("want a line for each of 8 seconds:\n%s", stdout)
	}
	for _, l := range lines {
		if l[5] != "0" {
			t.Logf("line %q: 503 is not 0", l[0])
		}
		if l[6] != "0" || l[9] != "" {
			t.Logf("line %q: other is not 0", l[0])
		}
	}
	if s, _ := strconv.Atoi(lines[5][2]); s < 600 {
		t.Errorf("second 5, the surge: %q, want it sent", lines[5][0])
	}
	m := summaryAnswers.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no answers in the summary:\n%s", stdout)
	}
	ok, _ := strconv.Atoi(m[1])
	limited, _ := strconv.Atoi(m[2])
	other, _ := strconv.Atoi(m[4])
	busy, _ := strconv.Atoi(m[3])
	if ok == 0 || limited == 0 {
		t.Errorf("summary %q: want 2xx and 429\n%s", m[0], stdout)
	}
	// A starved machine's delays look to protection like the API's: it
	// turns a few away (503 overloaded), as the gateway misses a few
	// timeouts (other). Each stays under 1 in 200 answers.
	all := ok + limited + busy + other
	switch {
	case busy*200 > all:
		t.Errorf("summary %q: 503 is more than 1 in 200 answers\n%s", m[0], stdout)
	case other*200 > all:
		t.Errorf("summary %q: other is more than 1 in 200 answers\n%s", m[0], stdout)
	case busy > 0 || other > 0:
		t.Logf("summary %q: 503 %d, other %d: a machine short of cores", m[0], busy, other)
	}
}

// checkWalkthroughProtect checks GET /admin/protect against the README:
// the API kept up with what the limits admitted, so protection never cut
// its limit from the max it starts at.
func checkWalkthroughProtect(t *testing.T, adminAddr string) {
	t.Helper()
	resp, err := client.Get("http://" + adminAddr + "/admin/protect")
	if err != nil {
		t.Fatalf("GET /admin/protect: %v", err)
	}
	defer resp.Body.Close()
	var got struct {
		Routes []struct {
			Route      string
			Limit, Max float64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /admin/protect: %d, %v", resp.StatusCode, err)
	}
	if len(got.Routes) != 1 || got.Routes[0].Route != "lucky-meal" || got.Routes[0].Max != 440 || got.Routes[0].Limit != 440 {
		t.Errorf("GET /admin/protect: %+v, want lucky-meal's limit at its max, 440", got.Routes)
	}
}

// mockSecond matches the mock's line a second (-v).
var mockSecond = regexp.MustCompile(`^floodgate upstream: t=\d+s rate=(\d+)/s (\w+) `)

// checkWalkthroughMock checks the mock's output against the README: never
// past its capacity, every answer 200, the totals at Ctrl-C.
func checkWalkthroughMock(t *testing.T, out string) {
	t.Helper()
	seconds := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := mockSecond.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		seconds++
		if rate, _ := strconv.Atoi(m[1]); rate > 500 || m[2] != "normal" {
			t.Errorf("the mock: %q, want at most its capacity of 500 and normal", sc.Text())
		}
	}
	if seconds < 8 {
		t.Errorf("the mock printed %d lines a second, want one a second:\n%s", seconds, out)
	}
	m := regexp.MustCompile(`floodgate upstream: stopped after (\d+) requests \((.*)\)\n`).FindStringSubmatch(out)
	if m == nil || m[2] != "200:"+m[1] || m[1] == "0" {
		t.Errorf("the mock's totals: %q, want every answer 200:\n%s", m, out)
	}
}
