// Command flood offers floodgate load's open-loop load (the same generator,
// rehearse.Run, and the same profiles, users, addresses and retries) and
// also times the admitted answers apart from the rest, which floodgate
// load's summary does not: in a surge with immediate retries most answers
// are 429s, and their p99 says little about what an admitted user waited.
//
//	go run ./bench/flood -url URL [-profile surge] [-rate 5000] [-users 20000] [-retry immediate] ...
//
// It prints floodgate load's summary, then one line of key=value pairs for
// bench/flood.sh: the counts of the run, the p99 of every answer from its
// scheduled send (what floodgate load reports), and the p50, p99 and p99.9
// of the 200 answers and of all answers from the moment each attempt was
// handed to the client to the end of its body (the generator's own send
// lag, reported as lag_p99, is not in them).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/internal/h1"
	"github.com/floodgate-gw/floodgate/rehearse"
)

func main() {
	url := flag.String("url", "", "the URL to send every request to (required)")
	profile := flag.String("profile", "surge", "const, step or surge")
	rate := flag.Float64("rate", 5000, "requests/s: of the run, after the step, or the surge's peak")
	from := flag.Float64("from", 200, "the rate before -step-at (step, surge)")
	stepAt := flag.Duration("step-at", 5*time.Second, "when the step or the surge happens (step, surge)")
	duration := flag.Duration("duration", 20*time.Second, "the length of the run")
	method := flag.String("method", http.MethodGet, "the request method")
	users := flag.Int("users", 0, "an X-User-Id of u1..uN per request (0: none)")
	ips := flag.Int("ips", 0, "an X-Forwarded-For of one of N addresses per request (0: none)")
	retry := flag.String("retry", "none", "after a 429 or 503: none, immediate or backoff")
	seed := flag.Uint64("seed", 1, "draws users, addresses and the plateau's jitter")
	bare := flag.String("bare", "", "instead, serve a bare net/http limiter on this address (the reference for the 429's cost)")
	flag.Parse()
	if *bare != "" {
		serveBare(*bare)
		return
	}
	if *url == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}

	p := rehearse.Profile{Shape: rehearse.Shape(*profile), Rate: *rate, Duration: *duration, Seed: *seed}
	if p.Shape != rehearse.Const {
		p.From, p.StepAt = *from, *stepAt
	}
	t := &timer{do: h1.New(h1.Options{ConnectTimeout: rehearse.DefaultTimeout, MaxIdlePerHost: rehearse.DefaultConcurrencyCap})}
	defer t.do.CloseIdle()
	cfg := rehearse.LoadConfig{
		URL: *url, Method: *method, Profile: p, Users: *users, IPs: *ips, Retry: rehearse.Retry(*retry),
		Client: &http.Client{Transport: t, Timeout: rehearse.DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := rehearse.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "flood: %v\n", err)
		os.Exit(2)
	}
	rehearse.WriteSummary(os.Stdout, res)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }
	tot := &res.Total
	t.mu.Lock()
	fmt.Printf("flood: sent=%d retries=%d ok=%d 429=%d 503=%d other=%d errors=%d dropped=%d p99=%s lag_p99=%s"+
		" ok_n=%d ok_p50=%s ok_p99=%s ok_p999=%s all_p99_from_send=%s\n",
		tot.Sent, tot.Retries, tot.OK, tot.TooMany, tot.Unavailable, tot.Other, tot.Errors, tot.Dropped,
		ms(tot.P99), ms(res.LagP99), t.ok.Count(), ms(t.ok.Quantile(0.5)), ms(t.ok.Quantile(0.99)),
		ms(t.ok.Quantile(0.999)), ms(t.all.Quantile(0.99)))
	t.mu.Unlock()
	if tot.Sent > 0 && tot.Errors == tot.Sent {
		fmt.Fprintf(os.Stderr, "flood: no request got an answer from %s\n", *url)
		os.Exit(1)
	}
}

// A timer sends over the HTTP/1.1 client floodgate load uses by default
// and records how long each attempt took, from the call to the end of its
// body.
type timer struct {
	do      *h1.Client
	mu      sync.Mutex
	ok, all rehearse.Histogram
}

func (t *timer) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.do.Do(req, 0, nil)
	if err != nil {
		return nil, err
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, done: func() {
		d := time.Since(start)
		t.mu.Lock()
		if resp.StatusCode == http.StatusOK {
			t.ok.Record(d)
		}
		t.all.Record(d)
		t.mu.Unlock()
	}}
	return resp, nil
}

// A timedBody calls done once, when its body has been read to its end.
type timedBody struct {
	io.ReadCloser
	done func()
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.done != nil {
		b.done()
		b.done = nil
	}
	return n, err
}

// serveBare is the cheapest 429 net/http gives: a handler that admits each
// X-User-Id once per 10 s (a map under a lock, no framing guard, no
// routing, no metrics) and otherwise writes a fixed 429 with the headers
// and body floodgate's has. Admitted requests get "ok" without an
// upstream: the flood is all rejections.
func serveBare(addr string) {
	body := []byte(`{"error":{"code":"rate_limited","message":"Too many requests","request_id":"0123456789abcdef-1"}}` + "\n")
	type window struct{ start int64 }
	var mu sync.Mutex
	seen := map[string]window{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().Unix() / 10
		u := r.Header.Get("X-User-Id")
		mu.Lock()
		first := seen[u].start != now
		if first {
			seen[u] = window{now}
		}
		mu.Unlock()
		hd := w.Header()
		if first {
			io.WriteString(w, "ok")
			return
		}
		hd["Content-Type"] = []string{"application/json"}
		hd["Cache-Control"] = []string{"no-store"}
		hd["Retry-After"] = []string{"7"}
		hd["X-Request-Id"] = []string{"0123456789abcdef-1"}
		hd["Ratelimit"] = []string{`"user";r=0;t=7`}
		hd["Ratelimit-Policy"] = []string{`"user";q=1;w=10`}
		hd["X-Ratelimit-Limit"] = []string{"1"}
		hd["X-Ratelimit-Remaining"] = []string{"0"}
		hd["X-Ratelimit-Reset"] = []string{"7"}
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(body)
	})
	if err := http.ListenAndServe(addr, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
