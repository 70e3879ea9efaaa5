package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/rehearse"
)

func runLoad(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("load", "--url URL [flags]",
		"Offer load to URL and measure the answers: an open-loop generator, which sends every\n"+
			"request at its scheduled time whether or not earlier ones were answered, and measures\n"+
			"latency from that scheduled time, so a slow target shows as latency, not as a lower rate.\n\n"+
			"Profiles:\n"+
			"  const  --rate for --duration\n"+
			"  step   --from until --step-at, then --rate\n"+
			"  surge  the flash sale: --from until --step-at, a jump to --rate held for a second,\n"+
			"         a fall to --plateau over the next, and --plateau ±15% for the rest\n\n"+
			"Every second it prints a line: t sent 2xx 429 503 other p50 p99. A line counts the\n"+
			"attempts scheduled in that second (retries included) and is printed once all of them\n"+
			"have an outcome; p50 and p99 are in ms. other is any other status or no answer, and a\n"+
			"line with any ends with what they were, most first: statuses, and err:KIND for attempts\n"+
			"without an answer (err:timeout, err:refused, err:reset, err:closed, err:other), as in\n"+
			"504:10 502:2 err:timeout:1. The summary, --out and --html carry the same breakdown.\n"+
			"A request due while --concurrency-cap requests are in flight is dropped and counted, not delayed.\n"+
			"A summary follows. SIGINT or SIGTERM stops the run early and prints what it measured.")
	url := fs.String("url", "", "the `URL` to send every request to (required)")
	profile := fs.String("profile", "const", "the load `PROFILE`: const, step or surge")
	rate := fs.Float64("rate", 100, "requests per second `R`: of the run, after the step, or the surge's peak")
	from := fs.Float64("from", 200, "the rate `R` before --step-at (step, surge)")
	stepAt := fs.Duration("step-at", 5*time.Second, "when `D` the step or the surge happens (step, surge)")
	plateau := fs.Float64("plateau", 0, "the rate `R` a surge settles at (surge; default rate/5)")
	duration := fs.Duration("duration", 20*time.Second, "the length `D` of the run")
	method := fs.String("method", http.MethodGet, "the request `METHOD`")
	header := http.Header{}
	fs.Func("header", "add the header `'K: V'` to every request (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, ":")
		if k = strings.TrimSpace(k); !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("%q: want 'Name: value'", v)
		}
		header.Add(k, strings.TrimSpace(val))
		return nil
	})
	body := fs.String("body", "", "the request body `TEXT`")
	users := fs.Int("users", 0, "give each request an X-User-Id of u1..u`N`, drawn uniformly (0: none)")
	jwtKey := fs.String("jwt-key", "", "also give each request an Authorization: Bearer token for its user (--users), signed\nwith the private JWK in `FILE`, whose sub is the user id (see floodgate token)")
	jwtIss := fs.String("jwt-iss", "", "the iss `URL` of the --jwt-key tokens")
	jwtAud := fs.String("jwt-aud", "", "the `AUDIENCE` of the --jwt-key tokens")
	ips := fs.Int("ips", 0, "give each request an X-Forwarded-For of one of `N` addresses 10.x.y.z (0: none)")
	retry := fs.String("retry", "none", "what a client does after a 429 or 503, `MODE`: none; immediate, re-send at once;\nor backoff, wait Retry-After, else 100ms·2^n ±50%. At most 3 retries, each counted as sent")
	concurrency := fs.Int("concurrency-cap", rehearse.DefaultConcurrencyCap, "the most requests `N` in flight")
	timeout := fs.Duration("timeout", rehearse.DefaultTimeout, "the timeout `D` of each attempt")
	out := fs.String("out", "", "write the per-second series to `FILE` as CSV")
	html := fs.String("html", "", "write a self-contained chart of the run to `FILE`")
	seed := fs.Uint64("seed", 1, "the `N` that draws users, addresses and the plateau's jitter")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *url == "" {
		return cli.UsageError(fs, stderr, "--url is required")
	}
	set := cli.SetFlags(fs)
	p := rehearse.Profile{Shape: rehearse.Shape(*profile), Rate: *rate, Duration: *duration, Seed: *seed}
	switch p.Shape {
	case rehearse.Step, rehearse.Surge:
		p.From, p.StepAt = *from, *stepAt
	default:
		if set["from"] || set["step-at"] {
			return cli.UsageError(fs, stderr, "--from and --step-at apply to --profile step and surge")
		}
	}
	if set["plateau"] {
		if p.Shape != rehearse.Surge {
			return cli.UsageError(fs, stderr, "--plateau applies to --profile surge")
		}
		if *plateau <= 0 {
			return cli.UsageError(fs, stderr, "--plateau %v: must be positive", *plateau)
		}
		p.Plateau = *plateau
	}
	if *concurrency <= 0 {
		return cli.UsageError(fs, stderr, "--concurrency-cap %d: must be positive", *concurrency)
	}
	if *timeout <= 0 {
		return cli.UsageError(fs, stderr, "--timeout %v: must be positive", *timeout)
	}
	switch {
	case *jwtKey != "" && *users <= 0:
		return cli.UsageError(fs, stderr, "--jwt-key signs a token per user: it needs --users")
	case *jwtKey == "" && (set["jwt-iss"] || set["jwt-aud"]):
		return cli.UsageError(fs, stderr, "--jwt-iss and --jwt-aud apply to --jwt-key")
	}
	cfg := rehearse.LoadConfig{
		URL: *url, Method: *method, Header: header, Profile: p,
		Users: *users, IPs: *ips, Retry: rehearse.Retry(*retry),
		ConcurrencyCap: *concurrency, Timeout: *timeout,
	}
	if set["body"] {
		cfg.Body = []byte(*body)
	}
	if *jwtKey != "" {
		key, err := jwtsign.ReadKeyFile(*jwtKey)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate load: --jwt-key %s: %v\n", *jwtKey, err)
			return exitFailure
		}
		cfg.UserToken = key.UserTokens(*jwtIss, *jwtAud, time.Now().Add(p.Duration+time.Hour))
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError(fs, stderr, "%s", flagErrors(err))
	}

	// Create the files first: a typo in a path should not cost a run.
	var csvFile, htmlFile *os.File
	var csvw *rehearse.CSVWriter
	defer func() {
		for _, f := range []*os.File{csvFile, htmlFile} {
			if f != nil {
				f.Close()
			}
		}
	}()
	var err error
	if *out != "" {
		if csvFile, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "floodgate load: %v\n", err)
			return exitFailure
		}
		if csvw, err = rehearse.NewCSVWriter(csvFile); err != nil {
			fmt.Fprintf(stderr, "floodgate load: %s: %v\n", *out, err)
			return exitFailure
		}
	}
	if *html != "" {
		if htmlFile, err = os.Create(*html); err != nil {
			fmt.Fprintf(stderr, "floodgate load: %v\n", err)
			return exitFailure
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "floodgate load: %s %s, %s\n", cfg.Method, cfg.URL, p)
	rehearse.WriteHeader(stdout)
	var csvErr error
	cfg.OnSecond = func(s rehearse.Second) {
		rehearse.WriteSecond(stdout, s)
		if csvw != nil && csvErr == nil {
			csvErr = csvw.Write(s)
		}
	}
	res, err := rehearse.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate load: %v\n", err)
		return exitFailure
	}
	rehearse.WriteSummary(stdout, res)

	code := exitOK
	if csvFile != nil {
		if err := csvFile.Close(); csvErr == nil {
			csvErr = err
		}
		csvFile = nil
		if csvErr != nil {
			fmt.Fprintf(stderr, "floodgate load: %s: %v\n", *out, csvErr)
			code = exitFailure
		}
	}
	if htmlFile != nil {
		err := rehearse.WriteHTML(htmlFile, res, fmt.Sprintf("floodgate load: %s %s", cfg.Method, cfg.URL))
		if cerr := htmlFile.Close(); err == nil {
			err = cerr
		}
		htmlFile = nil
		if err != nil {
			fmt.Fprintf(stderr, "floodgate load: %s: %v\n", *html, err)
			code = exitFailure
		}
	}
	if t := res.Total; t.Sent > 0 && t.Errors == t.Sent {
		// Not one answer: the target is down or the URL is wrong, which
		// is not a measurement.
		fmt.Fprintf(stderr, "floodgate load: no request got an answer from %s\n", cfg.URL)
		code = exitFailure
	}
	return code
}
