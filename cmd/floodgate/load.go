package main

import (
	"context"
	"errors"
	"flag"
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

// runLoad parses the flags of floodgate load, creates the files it is to
// write, offers the load and reports what it measured.
func runLoad(args []string, stdout, stderr io.Writer) int {
	var f loadFlags
	fs := f.flagSet()
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	cfg, err := f.config(cli.SetFlags(fs))
	if err != nil {
		return cli.UsageError(fs, stderr, "%v", err)
	}
	if f.jwtKey != "" {
		key, err := jwtsign.ReadKeyFile(f.jwtKey)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate load: --jwt-key %s: %v\n", f.jwtKey, err)
			return exitFailure
		}
		cfg.UserToken = key.UserTokens(f.jwtIss, f.jwtAud, time.Now().Add(cfg.Profile.Duration+time.Hour))
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError(fs, stderr, "%s", flagErrors(err))
	}

	l := &loadRun{cfg: cfg, out: f.out, html: f.html, attempts: f.attempts, stdout: stdout, stderr: stderr}
	defer l.closeFiles()
	// Create the files first: a typo in a path should not cost a run.
	if err := l.createFiles(); err != nil {
		fmt.Fprintf(stderr, "floodgate load: %v\n", err)
		return exitFailure
	}
	res, err := l.run()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate load: %v\n", err)
		return exitFailure
	}
	return l.finish(res)
}

// loadFlags are the flags of floodgate load.
type loadFlags struct {
	url, method, body         string
	header                    http.Header
	profile                   string
	rate, from, plateau       float64
	stepAt, duration, timeout time.Duration
	users, ips, concurrency   int
	jwtKey, jwtIss, jwtAud    string
	retry                     string
	poisson                   bool
	out, html, attempts       string
	seed                      uint64
}

// flagSet returns the flag set of floodgate load, which parses into f.
func (f *loadFlags) flagSet() *flag.FlagSet {
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
	fs.StringVar(&f.url, "url", "", "the `URL` to send every request to (required)")
	fs.StringVar(&f.profile, "profile", "const", "the load `PROFILE`: const, step or surge")
	fs.Float64Var(&f.rate, "rate", 100, "requests per second `R`: of the run, after the step, or the surge's peak")
	fs.Float64Var(&f.from, "from", 200, "the rate `R` before --step-at (step, surge)")
	fs.DurationVar(&f.stepAt, "step-at", 5*time.Second, "when `D` the step or the surge happens (step, surge)")
	fs.Float64Var(&f.plateau, "plateau", 0, "the rate `R` a surge settles at (surge; default rate/5)")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "the length `D` of the run")
	fs.BoolVar(&f.poisson, "poisson", false, "send at random times, as independent clients arrive (exponential gaps that\nfollow the rate), rather than evenly spaced")
	fs.StringVar(&f.method, "method", http.MethodGet, "the request `METHOD`")
	f.header = http.Header{}
	fs.Func("header", "add the header `'K: V'` to every request (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, ":")
		if k = strings.TrimSpace(k); !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("%q: want 'Name: value'", v)
		}
		f.header.Add(k, strings.TrimSpace(val))
		return nil
	})
	fs.StringVar(&f.body, "body", "", "the request body `TEXT`")
	fs.IntVar(&f.users, "users", 0, "give each request an X-User-Id of u1..u`N`, drawn uniformly (0: none)")
	fs.StringVar(&f.jwtKey, "jwt-key", "", "also give each request an Authorization: Bearer token for its user (--users), signed\nwith the private JWK in `FILE`, whose sub is the user id (see floodgate token)")
	fs.StringVar(&f.jwtIss, "jwt-iss", "", "the iss `URL` of the --jwt-key tokens")
	fs.StringVar(&f.jwtAud, "jwt-aud", "", "the `AUDIENCE` of the --jwt-key tokens")
	fs.IntVar(&f.ips, "ips", 0, "give each request an X-Forwarded-For of one of `N` addresses 10.x.y.z (0: none)")
	fs.StringVar(&f.retry, "retry", "none", "what a client does after a 429 or 503, `MODE`: none; immediate, re-send at once;\nor backoff, wait Retry-After, else 100ms·2^n ±50%. At most 3 retries, each counted as sent")
	fs.IntVar(&f.concurrency, "concurrency-cap", rehearse.DefaultConcurrencyCap, "the most requests `N` in flight")
	fs.DurationVar(&f.timeout, "timeout", rehearse.DefaultTimeout, "the timeout `D` of each attempt")
	fs.StringVar(&f.out, "out", "", "write the per-second series to `FILE` as CSV")
	fs.StringVar(&f.html, "html", "", "write a self-contained chart of the run to `FILE`")
	fs.StringVar(&f.attempts, "attempts", "", "write every attempt to `FILE` as CSV: t_ms (its scheduled send), latency_ms,\nstatus (or err:KIND), retry (1 for a retry)")
	fs.Uint64Var(&f.seed, "seed", 1, "the `N` that draws users, addresses, the plateau's jitter and Poisson arrivals")
	return fs
}

// config is the configuration of the run the flags ask for, all but the
// tokens of --jwt-key, or the usage mistake that keeps them from making
// one; set are the flags given. The configuration is not validated yet.
func (f *loadFlags) config(set map[string]bool) (rehearse.LoadConfig, error) {
	if f.url == "" {
		return rehearse.LoadConfig{}, errors.New("--url is required")
	}
	p := rehearse.Profile{Shape: rehearse.Shape(f.profile), Rate: f.rate, Duration: f.duration, Poisson: f.poisson, Seed: f.seed}
	switch p.Shape {
	case rehearse.Step, rehearse.Surge:
		p.From, p.StepAt = f.from, f.stepAt
	default:
		if set["from"] || set["step-at"] {
			return rehearse.LoadConfig{}, errors.New("--from and --step-at apply to --profile step and surge")
		}
	}
	if set["plateau"] {
		if p.Shape != rehearse.Surge {
			return rehearse.LoadConfig{}, errors.New("--plateau applies to --profile surge")
		}
		if f.plateau <= 0 {
			return rehearse.LoadConfig{}, fmt.Errorf("--plateau %v: must be positive", f.plateau)
		}
		p.Plateau = f.plateau
	}
	if f.concurrency <= 0 {
		return rehearse.LoadConfig{}, fmt.Errorf("--concurrency-cap %d: must be positive", f.concurrency)
	}
	if f.timeout <= 0 {
		return rehearse.LoadConfig{}, fmt.Errorf("--timeout %v: must be positive", f.timeout)
	}
	switch {
	case f.jwtKey != "" && f.users <= 0:
		return rehearse.LoadConfig{}, errors.New("--jwt-key signs a token per user: it needs --users")
	case f.jwtKey == "" && (set["jwt-iss"] || set["jwt-aud"]):
		return rehearse.LoadConfig{}, errors.New("--jwt-iss and --jwt-aud apply to --jwt-key")
	}
	cfg := rehearse.LoadConfig{
		URL: f.url, Method: f.method, Header: f.header, Profile: p,
		Users: f.users, IPs: f.ips, Retry: rehearse.Retry(f.retry),
		ConcurrencyCap: f.concurrency, Timeout: f.timeout,
	}
	if set["body"] {
		cfg.Body = []byte(f.body)
	}
	return cfg, nil
}

// loadRun is one run of floodgate load: its configuration, and the files
// it writes what it measured to.
type loadRun struct {
	cfg                 rehearse.LoadConfig
	out, html, attempts string // the paths of --out, --html and --attempts, or ""
	stdout, stderr      io.Writer

	csvFile, htmlFile, attemptsFile *os.File // nil once closed
	csvw                            *rehearse.CSVWriter
	csvErr                          error // the first write to the CSV file that failed
	attemptsw                       *rehearse.AttemptWriter
}

// createFiles creates the files of --out and --html.
func (l *loadRun) createFiles() error {
	var err error
	if l.out != "" {
		if l.csvFile, err = os.Create(l.out); err != nil {
			return err
		}
		if l.csvw, err = rehearse.NewCSVWriter(l.csvFile); err != nil {
			return fmt.Errorf("%s: %w", l.out, err)
		}
	}
	if l.html != "" {
		if l.htmlFile, err = os.Create(l.html); err != nil {
			return err
		}
	}
	if l.attempts != "" {
		if l.attemptsFile, err = os.Create(l.attempts); err != nil {
			return err
		}
		l.attemptsw = rehearse.NewAttemptWriter(l.attemptsFile)
	}
	return nil
}

// closeFiles closes the files still open: those of a run that ended
// early.
func (l *loadRun) closeFiles() {
	for _, f := range []*os.File{l.csvFile, l.htmlFile, l.attemptsFile} {
		if f != nil {
			f.Close()
		}
	}
}

// run offers the load until the profile ends, or SIGINT or SIGTERM stops
// it, printing every second as it is complete, and the summary.
func (l *loadRun) run() (*rehearse.Result, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(l.stdout, "floodgate load: %s %s, %s\n", l.cfg.Method, l.cfg.URL, l.cfg.Profile)
	rehearse.WriteHeader(l.stdout)
	l.cfg.OnSecond = func(s rehearse.Second) {
		rehearse.WriteSecond(l.stdout, s)
		if l.csvw != nil && l.csvErr == nil {
			l.csvErr = l.csvw.Write(s)
		}
	}
	if l.attemptsw != nil {
		l.cfg.OnAttempt = l.attemptsw.Write
	}
	res, err := rehearse.Run(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	rehearse.WriteSummary(l.stdout, res)
	return res, nil
}

// finish closes the CSV file, writes the chart, and returns the exit
// code: a failure when a file could not be written or no request got an
// answer.
func (l *loadRun) finish(res *rehearse.Result) int {
	code := exitOK
	if l.csvFile != nil {
		if err := l.csvFile.Close(); l.csvErr == nil {
			l.csvErr = err
		}
		l.csvFile = nil
		if l.csvErr != nil {
			fmt.Fprintf(l.stderr, "floodgate load: %s: %v\n", l.out, l.csvErr)
			code = exitFailure
		}
	}
	if l.attemptsFile != nil {
		err := l.attemptsw.Flush()
		if cerr := l.attemptsFile.Close(); err == nil {
			err = cerr
		}
		l.attemptsFile = nil
		if err != nil {
			fmt.Fprintf(l.stderr, "floodgate load: %s: %v\n", l.attempts, err)
			code = exitFailure
		}
	}
	if l.htmlFile != nil {
		err := rehearse.WriteHTML(l.htmlFile, res, fmt.Sprintf("floodgate load: %s %s", l.cfg.Method, l.cfg.URL))
		if cerr := l.htmlFile.Close(); err == nil {
			err = cerr
		}
		l.htmlFile = nil
		if err != nil {
			fmt.Fprintf(l.stderr, "floodgate load: %s: %v\n", l.html, err)
			code = exitFailure
		}
	}
	if t := res.Total; t.Sent > 0 && t.Errors == t.Sent {
		// Not one answer: the target is down or the URL is wrong, which
		// is not a measurement.
		fmt.Fprintf(l.stderr, "floodgate load: no request got an answer from %s\n", l.cfg.URL)
		code = exitFailure
	}
	return code
}
