package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/floodgate-gw/floodgate/internal/needs"
)

// -update-screenshot writes the dashboard's screenshot to docs/ as well.
var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/dashboard.png from the browser test")

// dashboardConfig has a route with a per-user limit and a route-wide one
// under load, a second route, and a breaker to force.
const dashboardConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
global_limits:
  - name: everyone
    key: [global]
    rate: 400/s
routes:
  - id: coupon
    match: {path: /coupon/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 3/1m
      - name: route
        key: [route]
        rate: 40/s
  - id: lucky
    match: {path: /lucky/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
`

// browser starts Debian's chromium headless, with a fresh profile, and
// collects what the page writes to its console.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := needs.Program(t, "chromium", "chromium", "chromium-browser", "google-chrome")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// errors are the console's errors and exceptions so far.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			out = append(out, m.String())
		}
	}
	return out
}

func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wait polls the JavaScript expression until it is true.
func (b *browser) wait(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 40*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, text)
	}
}

// js runs a script in the page for its effect.
func js(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, t)
		return err
	})
}

func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (b *browser) screenshot(t *testing.T, name string) []byte {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return png
}

// load sends requests until ctx ends: eight users over their per-user
// limit on /coupon, and steady traffic on /lucky.
func load(ctx context.Context, listen string) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				path, user := "/coupon/receive", fmt.Sprintf("u%d", (i*4+w)%8)
				if i%3 == 0 {
					path = "/lucky/draw"
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+listen+path, nil)
				req.Header.Set("X-User-Id", user)
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// The dashboard in a real browser: it loads without console errors, its
// numbers and charts move under load, the top rejected keys show, a key
// is looked up and reset, an action without the token is refused with a
// message, and a forced breaker shows.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser over a loaded gateway for 15 s; make check runs it")
	}
	b := startBrowser(t)
	f := newFixture(t, nil)
	f.write(dashboardConfig)
	p := f.serve()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { load(ctx, f.listen); close(loaded) }()
	t.Cleanup(func() { stop(); <-loaded })

	b.do(t, "opening the dashboard", chromedp.Navigate("http://"+f.admin+"/"))
	b.wait(t, "the routes", `document.querySelectorAll("#routes tr.route").length === 2`)
	// Both routes of a small gateway open with their charts.
	b.wait(t, "the coupon route's charts", `document.querySelectorAll(".detail canvas").length >= 6`)
	b.wait(t, "requests/s above 0", `parseFloat(document.getElementById("total").textContent) > 0`)
	b.wait(t, "429s above 0", `parseFloat(document.getElementById("limited").textContent) > 0`)

	// The charts move: the history grows, and the requests chart redraws.
	first := eval[string](t, b, `document.querySelector(".detail .c-req canvas").toDataURL()`)
	n := eval[int](t, b, `hist.times.length`)
	b.wait(t, "the history to grow", fmt.Sprintf(`hist.times.length >= %d`, n+2))
	b.wait(t, "the coupon route's admitted series", `(hist.series["coupon"].admitted || []).some(v => v > 0)`)
	b.wait(t, "the user limit's 429s", `(hist.series["coupon"].rejected["user"] || []).some(v => v > 0)`)
	if now := eval[string](t, b, `document.querySelector(".detail .c-req canvas").toDataURL()`); now == first {
		t.Error("the requests chart did not change while the history grew")
	}
	// A route-wide limit draws its use of the threshold.
	b.wait(t, "the route limit's use", `document.querySelector(".detail").textContent.includes("route use %")`)
	// No route is protected: no protection chart, no protection line.
	if n := eval[int](t, b, `document.querySelectorAll(".c-prot").length + [...document.querySelectorAll(".protectline")].filter(e => e.textContent).length`); n != 0 {
		t.Errorf("%d protection charts or lines without a protected route", n)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Fatalf("console errors after load:\n%s", strings.Join(errs, "\n"))
	}

	// Without the token, an action is refused and the page says why.
	b.do(t, "reloading without the token", chromedp.Click(chromedp.ID("reload")))
	b.wait(t, "the 401 message", `document.getElementById("message").textContent.includes("401")`)
	if msg := eval[string](t, b, `document.getElementById("message").textContent`); !strings.Contains(msg, "admin token") {
		t.Errorf("message after a 401: %q, want it to ask for the admin token", msg)
	}
	b.wait(t, "the top keys to ask for the token", `document.querySelector(".tops").textContent.includes("admin token")`)

	b.do(t, "entering the token",
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.CSS(`#tokenform button[type=submit]`)))
	if v := eval[string](t, b, `document.getElementById("token").value`); v != "" {
		t.Errorf("the token field still holds %q after use", v)
	}
	b.do(t, "reloading with the token", chromedp.Click(chromedp.ID("reload")))
	b.wait(t, "the reload's answer", `document.getElementById("message").textContent === "reload: reloaded"`)

	// The top rejected keys of the per-user limit: the loaded users.
	b.wait(t, "the top keys table", `document.querySelectorAll(".detail .topkeys tbody tr").length >= 4`)
	keys := eval[[]string](t, b, `[...document.querySelectorAll(".detail .topkeys td.key")].map(td => td.textContent)`)
	for _, k := range keys {
		if !strings.HasPrefix(k, "u") {
			t.Errorf("top key %q is not one of the loaded users", k)
		}
	}
	b.wait(t, "the busiest keys' use", `[...document.querySelectorAll(".detail .topkeys td")].some(td => td.textContent === "3 of 3")`)

	// Look a key up and reset it: two requests leave one of three, in
	// one window of the minute-long limit, with the lookup's time to
	// spare (a loaded machine's).
	awayFromEdge(time.Minute, 30*time.Second)
	for range 2 {
		req, _ := http.NewRequest("GET", "http://"+f.listen+"/coupon/receive", nil)
		req.Header.Set("X-User-Id", "browser")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	b.do(t, "looking the key up",
		chromedp.SetValue(chromedp.ID("lk-route"), "coupon"),
		js(`fillLimits(), undefined`),
		chromedp.SetValue(chromedp.ID("lk-limit"), "user"),
		js(`fillParts(), undefined`),
		chromedp.SendKeys(chromedp.CSS("#lk-parts input"), "browser"),
		chromedp.Click(chromedp.CSS(`#lookup button[type=submit]`)))
	b.wait(t, "the key's state", `document.getElementById("lk-result").textContent.startsWith("fixed_window: 1 of 3 left") || document.getElementById("lk-result").textContent.includes(": 1 of 3 left")`)
	b.do(t, "resetting the key", chromedp.Click(chromedp.ID("lk-reset")))
	b.wait(t, "the reset's answer", `document.getElementById("message").textContent === "reset: done"`)
	st := p.admin("GET", "/admin/limits?route=coupon&limit=user&key=browser")
	if rem, _ := st.json(t)["remaining"].(float64); st.code != 200 || rem != 3 {
		t.Errorf("after the reset: %d %s, want remaining 3", st.code, st.body)
	}

	// A reset of a limit the gateway does not have: 404 with its message.
	b.do(t, "resetting an unknown limit",
		js(`document.getElementById("lk-limit").append(el("option", {value: "nosuch", textContent: "nosuch"})), undefined`),
		chromedp.SetValue(chromedp.ID("lk-limit"), "nosuch"),
		js(`fillParts(), document.getElementById("lk-parts").append(el("input", {value: "x"})), undefined`),
		chromedp.Click(chromedp.ID("lk-reset")))
	b.wait(t, "the 404 message", `document.getElementById("message").textContent.includes("404")`)
	if msg := eval[string](t, b, `document.getElementById("message").textContent`); !strings.Contains(msg, "nosuch") {
		t.Errorf("message after resetting an unknown limit: %q, want it to name the limit", msg)
	}

	// Set a runtime override from the page, see it in force, remove it.
	b.do(t, "setting an override",
		chromedp.SendKeys(chromedp.ID("ov-route"), "coupon"),
		chromedp.SendKeys(chromedp.ID("ov-limit"), "route"),
		chromedp.SendKeys(chromedp.ID("ov-rate"), "20/s"),
		chromedp.SendKeys(chromedp.ID("ov-ttl"), "10m"),
		chromedp.Click(chromedp.CSS(`#ovform button[type=submit]`)))
	b.wait(t, "the override in force", `document.getElementById("overrides").textContent.includes("rate=20/s") && document.querySelector("#routes tr.route .limits").textContent.includes("(now rate=20/s)")`)
	if r := p.admin("GET", "/admin/overrides/coupon/route"); r.code != 200 || !strings.Contains(r.body, `"20/s"`) {
		t.Errorf("the override the page set: %d %s", r.code, r.body)
	}
	b.do(t, "removing it", chromedp.Click(chromedp.CSS(`#overrides button`)))
	b.wait(t, "no override", `document.getElementById("overrides").textContent === "none"`)

	// Force the coupon breaker open: the table and the detail show it.
	b.do(t, "forcing the breaker open", chromedp.Click(chromedp.CSS(`#d-0 .force-open`)))
	b.wait(t, "the forced breaker", `document.querySelector("#routes tr.route .badge.open") !== null && document.querySelector("#routes tr.route .badge.open").textContent === "open (forced)"`)
	b.wait(t, "breaker 503s", `(hist.series["coupon"].breaker || []).some(v => v > 0)`)
	png := b.screenshot(t, "dashboard.png")
	if *updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.do(t, "giving the breaker back", chromedp.Click(chromedp.CSS(`#d-0 .force-auto`)))
	b.wait(t, "the breaker back in its window", `document.querySelector("#routes tr.route .badge") && !document.querySelector("#routes tr.route .badge").textContent.includes("forced")`)

	// The console holds no exceptions, and no errors but the refused
	// calls the test made on purpose.
	for _, e := range b.errors() {
		if !strings.Contains(e, "status of 401") && !strings.Contains(e, "status of 404") {
			t.Errorf("console: %s", e)
		}
	}
}

// A gateway without routes, and one with 1,000: the page works, and the
// big one pages its table and finds a route by its id.
func TestDashboardInBrowserRouteCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser over 1,000 routes; make check runs it")
	}
	b := startBrowser(t)
	f := newFixture(t, nil)
	// Only the Envoy rate-limit service: no HTTP routes at all.
	rules := filepath.Join(f.dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(rlsRules(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(strings.NewReplacer("{{RLS}}", freeAddr(t), "{{RULES}}", rules).Replace(rlsConfig))
	p := f.serve()
	b.do(t, "opening the dashboard of no routes", chromedp.Navigate("http://"+f.admin+"/"))
	b.wait(t, "the empty table", `document.getElementById("routes").textContent.includes("No routes")`)
	b.wait(t, "a few polls", `Number(document.body.dataset.polls || 0) >= 2`)

	if code := p.status("/nowhere"); code != 404 {
		t.Fatalf("GET /nowhere without routes: %d, want 404", code)
	}
	var sb strings.Builder
	sb.WriteString("server:\n  listen: \"{{LISTEN}}\"\nadmin:\n  listen: \"{{ADMIN}}\"\nroutes:\n")
	for i := range 1000 {
		fmt.Fprintf(&sb, "  - id: r%04d\n    match: {path: /r%04d}\n    upstream: {targets: [\"{{UPSTREAM}}\"]}\n    limits: [{name: ip, key: [ip], rate: 5/s}]\n", i, i)
	}
	f.write(sb.String())
	p.waitFor("the 1,000 routes", func() bool { return p.status("/r0999") == 200 })
	// 1,000 routes, and the 404s no route took.
	b.wait(t, "the paged table", `routes.length === 1001 && document.getElementById("pageinfo").textContent === "page 1 of 41"`)
	if name := eval[string](t, b, `document.querySelector("#routes tr.route button").textContent`); name != "▸ (no route)" {
		t.Errorf("the first row is %q, want the requests no route took", name)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#routes tr.route").length`); n != 25 {
		t.Errorf("rows on a page: %d, want 25", n)
	}
	if n := eval[int](t, b, `document.querySelectorAll(".detail").length`); n != 0 {
		t.Errorf("a gateway of 1,000 routes opened %d of them by itself", n)
	}
	// The busiest route of 1,000 comes first when asked.
	ctx, stop := context.WithCancel(context.Background())
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		for ctx.Err() == nil {
			p.status("/r0777")
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stop(); <-busy })
	b.do(t, "ordering busiest first", chromedp.SetValue(chromedp.ID("order"), "rate"), js(`document.getElementById("order").dispatchEvent(new Event("change")), undefined`))
	b.wait(t, "the busy route first", `document.querySelector("#routes tr.route").dataset.route === "r0777"`)
	b.do(t, "ordering by id", chromedp.SetValue(chromedp.ID("order"), "route"), js(`document.getElementById("order").dispatchEvent(new Event("change")), undefined`))

	b.do(t, "filtering", chromedp.SendKeys(chromedp.ID("filter"), "r0777"))
	b.wait(t, "the one route", `document.querySelectorAll("#routes tr.route").length === 1 && document.querySelector("#routes tr.route").dataset.route === "r0777"`)
	b.do(t, "opening it", chromedp.Click(chromedp.CSS(`#routes tr.route button`)))
	b.wait(t, "its charts", `document.querySelectorAll(".detail canvas").length >= 3`)
	for _, e := range b.errors() {
		t.Errorf("console: %s", e)
	}
}

// protectConfig has a route whose protection admits at most 10/s, under
// more than that, and a route without protection.
const protectConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
routes:
  - id: partner
    match: {path: /partner/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    protect: {max: 10, warm_up: 4s}
  - id: plain
    match: {path: /plain/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
`

// A protected route's charts: its limit, what reached the upstream (no
// more than the limit, though far more was asked) and what protection
// turned away, from a real gateway under load; the route beside it has
// no such chart.
func TestDashboardInBrowserProtection(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser over a loaded gateway; make check runs it")
	}
	b := startBrowser(t)
	f := newFixture(t, nil)
	f.write(protectConfig)
	f.serve()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				path := "/partner/quote"
				if (i+w)%4 == 0 {
					path = "/plain/quote"
				}
				if resp, err := client.Get("http://" + f.listen + path); err == nil {
					resp.Body.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })

	b.do(t, "opening the dashboard", chromedp.Navigate("http://"+f.admin+"/"))
	const partner, plain = `document.querySelector('.detail[data-route="partner"]')`, `document.querySelector('.detail[data-route="plain"]')`
	b.wait(t, "the protection chart", partner+` && `+partner+`.querySelector(".c-prot canvas") !== null`)
	b.wait(t, "the limit", `(hist.series.partner.protect.limit || []).some(v => v > 0 && v <= 10)`)
	b.wait(t, "requests forwarded", `(hist.series.partner.protect.forwarded || []).some(v => v > 0)`)
	b.wait(t, "requests turned away", `(hist.series.partner.protect.refused || []).some(v => v > 0)`)
	// The charts draw them: the plots hold the series the history does.
	b.wait(t, "the charts' data", `charts.get(detailId("partner") + "/prot").plot.data[3].some(v => v > 0) && charts.get(detailId("partner") + "/away").plot.data[1].some(v => v > 0)`)
	// What reached the upstream is what protection admitted, at most the
	// limit of 10/s and a burst: the route's answers but those it turned
	// away (its 503s), several times as many.
	last := eval[struct{ Answered, Forwarded, Refused float64 }](t, b, `(s => ({Answered: lastOf(s.admitted) + lastOf(s.upstream),
		Forwarded: lastOf(s.protect.forwarded), Refused: lastOf(s.protect.refused)}))(hist.series.partner)`)
	if last.Forwarded > 14 || math.Abs(last.Answered-last.Forwarded-last.Refused) > 1 {
		t.Errorf("answered %.1f/s, forwarded %.1f/s, turned away %.1f/s: want at most the limit of 10/s and a burst forwarded, the rest turned away",
			last.Answered, last.Forwarded, last.Refused)
	}
	line := eval[string](t, b, partner+`.querySelector(".protectline").textContent`)
	if !strings.HasPrefix(line, "protection: limit ") || !strings.Contains(line, "max 10/s") {
		t.Errorf("the protection line: %q", line)
	}
	if cell := eval[string](t, b, `document.querySelector('#routes tr.route[data-route="partner"] .limits').textContent`); !strings.HasPrefix(cell, "protect ") {
		t.Errorf("the partner row's limits: %q, want its protection", cell)
	}
	b.wait(t, "the plain route's charts", plain+` && `+plain+`.querySelectorAll("canvas").length >= 2`)
	if n := eval[int](t, b, plain+`.querySelectorAll(".c-prot").length`); n != 0 {
		t.Error("the route without protection has a protection chart")
	}
	for _, e := range b.errors() {
		t.Errorf("console: %s", e)
	}
}
