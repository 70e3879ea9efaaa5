package rehearse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/internal/h1"
)

// A Retry is what a client does after a 429 or a 503.
type Retry string

const (
	// RetryNone gives up at once.
	RetryNone Retry = "none"
	// RetryImmediate re-sends at once, the client with no backoff that
	// stacks a second flood on the first.
	RetryImmediate Retry = "immediate"
	// RetryBackoff waits the answer's Retry-After, or else 100 ms · 2^n
	// with ±50% jitter before the n-th retry (n from 0).
	RetryBackoff Retry = "backoff"
)

const (
	// MaxRetries bounds the retries of one request: at most 1+MaxRetries
	// attempts.
	MaxRetries = 3
	// maxRetryAfter is the longest Retry-After a backing-off client waits;
	// it gives up on a longer one.
	maxRetryAfter = time.Minute
	backoffBase   = 100 * time.Millisecond

	// DefaultConcurrencyCap and DefaultTimeout are what a zero
	// LoadConfig.ConcurrencyCap and Timeout mean.
	DefaultConcurrencyCap = 10000
	DefaultTimeout        = 10 * time.Second

	// reportEvery is how often the run looks for seconds that became final.
	reportEvery = 50 * time.Millisecond
)

// LoadConfig describes a load run.
type LoadConfig struct {
	// URL is where every request goes.
	URL string
	// Method is the requests' method; empty means GET.
	Method string
	// Header is sent with every request.
	Header http.Header
	// Body is sent with every request; nil sends none.
	Body []byte
	// Profile says when to send.
	Profile Profile
	// Users, when positive, gives each request an X-User-Id of u1…uUsers,
	// drawn uniformly; zero sends none.
	Users int
	// UserToken, when not nil and Users is positive, gives each request an
	// Authorization: Bearer header with what it returns for the request's
	// user id (a token whose sub is that id, say), so that a gateway that
	// tells users apart by a verified token limits them one by one. Its
	// answers are kept: it is called for a user's first request (and again
	// only for requests of that user sent before it returned), from the
	// goroutines that send, so it must be safe for concurrent use.
	UserToken func(user string) string
	// IPs, when positive, gives each request an X-Forwarded-For of one of
	// IPs addresses 10.0.0.1, 10.0.0.2, …, drawn uniformly; zero sends none.
	IPs int
	// Retry is what the client does after a 429 or a 503; empty means
	// RetryNone. Retries are offered load: each is counted as sent, in the
	// second it is due.
	Retry Retry
	// ConcurrencyCap bounds the requests in flight; a request due while
	// the cap is reached is dropped, and counted, not delayed. Zero means
	// DefaultConcurrencyCap.
	ConcurrencyCap int
	// Timeout bounds each attempt, from its send to the end of its answer;
	// zero means DefaultTimeout.
	Timeout time.Duration
	// Client sends the requests; nil means the package's own: plain-http
	// requests over an HTTP/1.1 client that reads each answer in the
	// request's goroutine (a fifth less CPU per request than
	// http.Transport, so that the generator disturbs what it measures
	// less), https through NewClient(ConcurrencyCap, Timeout).
	Client *http.Client
	// OnSecond, when not nil, is called with each row of the series as it
	// becomes final, in order, from one goroutine.
	OnSecond func(Second)
	// OnAttempt, when not nil, is called with each attempt as it ends
	// (one cut short by the end of an interrupted run excepted), from the
	// goroutines that send: it must be safe for concurrent use, and quick,
	// as it delays the attempt's retry and its second. It is for what the
	// per-second series sums away: which attempts were slow, the latency
	// of some answers apart from the others.
	OnAttempt func(Attempt)
	// Stop, when not nil, ends the run when it is closed, as though the
	// profile's Duration ended then: no request is sent after it, those
	// under way finish, and the run is not interrupted; the Result's
	// Profile.Duration is then how long the run was. A run that lasts
	// until what it causes has happened (a demo that goes on until a
	// circuit breaker has closed) sets Duration to the longest it may
	// take and closes Stop.
	Stop <-chan struct{}
}

// An Attempt is one attempt of a load run, as LoadConfig.OnAttempt
// hands it out.
type Attempt struct {
	// At is the attempt's scheduled send time, since the start of the run.
	At time.Duration
	// Latency runs from At to the end of the answer, or to the error.
	Latency time.Duration
	// Status is the answer's status; zero for an attempt without an
	// answer, whose Error says why.
	Status int
	// Error is the kind of error of an attempt without an answer, as a
	// Breakdown counts it ("err:timeout"); empty when there was an answer.
	Error string
	// Retry is whether the attempt was a retry.
	Retry bool
}

// maxIPs is how many addresses 10.0.0.0/8 holds for IPs.
const maxIPs = 1<<24 - 2

// Validate reports every problem of c.
func (c *LoadConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if u, err := url.Parse(c.URL); err != nil {
		bad("url %q: %v", c.URL, err)
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("url %q: must be an absolute http:// or https:// URL", c.URL)
	}
	if err := c.Profile.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Users < 0 {
		bad("users %d: must not be negative", c.Users)
	}
	if c.IPs < 0 || c.IPs > maxIPs {
		bad("ips %d: must be between 0 and %d", c.IPs, maxIPs)
	}
	switch c.Retry {
	case "", RetryNone, RetryImmediate, RetryBackoff:
	default:
		bad("retry %q: must be none, immediate or backoff", c.Retry)
	}
	if c.ConcurrencyCap < 0 {
		bad("concurrency-cap %d: must be positive", c.ConcurrencyCap)
	}
	if c.Timeout < 0 {
		bad("timeout %v: must be positive", c.Timeout)
	}
	return errors.Join(errs...)
}

// NewClient returns the client a load run uses by default: one connection
// pool that keeps up to maxConns connections to the target alive, no
// proxy from the environment, no redirects followed (a 3xx is an answer
// like any other), no compression to undo.
func NewClient(maxConns int, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			TLSHandshakeTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// A Result is what a load run measured.
type Result struct {
	Profile Profile
	// Seconds is the per-second series.
	Seconds []Second
	// Total sums Seconds (its T is -1); its P50 and P99 are over the
	// whole run.
	Total Second
	// Scheduled counts the requests the profile scheduled, retries not
	// included; Succeeded, those whose last attempt was answered 2xx.
	Scheduled, Succeeded int64
	// Latency quantiles of every attempt with an outcome.
	P90, P999, Max time.Duration
	// Elapsed is the wall time of the run, to its last answer.
	Elapsed time.Duration
	// Span is the time over which requests were offered: the profile's
	// duration (up to the interruption, if interrupted), or longer when
	// retries went on after it.
	Span time.Duration
	// LagP99 and LagMax measure how late the generator sent first
	// attempts after their scheduled time. They should be far below the
	// latencies measured; when not, the generator's machine is the
	// bottleneck.
	LagP99, LagMax time.Duration
	// Errors counts attempts without an answer by kind.
	Errors map[string]int64
	// Interrupted is whether the run's context ended it early.
	Interrupted bool
}

// OfferedRate is the requests per second the profile scheduled.
func (r *Result) OfferedRate() float64 { return rate(r.Scheduled, r.planned()) }

// AchievedRate is the attempts per second actually sent, retries included.
func (r *Result) AchievedRate() float64 { return rate(r.Total.Sent, r.Span) }

// GoodRate is the 2xx answers per second.
func (r *Result) GoodRate() float64 { return rate(r.Total.OK, r.Span) }

func (r *Result) planned() time.Duration {
	if r.Interrupted {
		return min(r.Span, r.Profile.Duration)
	}
	return r.Profile.Duration
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Run offers the load c describes and measures the answers.
//
// The load is open-loop: every request is sent at its scheduled time
// whether or not earlier ones were answered, and its latency runs from that
// scheduled time. A closed-loop tester, which waits for an answer before
// the next request, sends less when the target slows down and so never
// measures the queueing a real crowd meets — the coordinated omission Gil
// Tene described. Here a slow target shows as latency, a full generator as
// dropped requests and send lag, never as a quietly lower rate.
//
// When ctx ends, Run stops sending, cancels the requests in flight and
// returns what it measured, with Interrupted set. The error is not nil only
// when c is invalid.
func Run(ctx context.Context, c LoadConfig) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.Retry == "" {
		c.Retry = RetryNone
	}
	if c.ConcurrencyCap == 0 {
		c.ConcurrencyCap = DefaultConcurrencyCap
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(c.Body)
	}
	tmpl, err := http.NewRequestWithContext(ctx, c.Method, c.URL, body)
	if err != nil {
		return nil, err
	}
	if c.Header != nil {
		tmpl.Header = c.Header.Clone()
		if h := tmpl.Header.Get("Host"); h != "" {
			tmpl.Host = h
			tmpl.Header.Del("Host")
		}
	}
	l := &loader{
		c:     c,
		ctx:   ctx,
		tmpl:  tmpl,
		rec:   newRecorder(),
		rng:   rand.New(rand.NewPCG(c.Profile.Seed, c.Profile.Seed^0xda3e39cb94b95bdb)),
		start: time.Now(),
	}
	if c.Client != nil {
		l.send = c.Client.Do
	} else {
		fallback := NewClient(c.ConcurrencyCap, c.Timeout)
		own := h1.New(h1.Options{ConnectTimeout: c.Timeout, MaxIdlePerHost: c.ConcurrencyCap, Fallback: fallback.Transport})
		defer own.CloseIdle()
		l.send = func(req *http.Request) (*http.Response, error) { return own.Do(req, 0, nil) }
		l.timeout = c.Timeout
	}
	return l.run(), nil
}

type loader struct {
	c    LoadConfig
	ctx  context.Context
	tmpl *http.Request
	send func(*http.Request) (*http.Response, error)
	// tokens holds UserToken's answer for each user seen: user -> string.
	tokens sync.Map
	// timeout, when not zero, bounds each attempt of send, which does not
	// bound it itself (an http.Client has its own Timeout).
	timeout time.Duration
	rec     *recorder
	rng     *rand.Rand // draws users and IPs; the pacing loop's alone
	start   time.Time

	inflight  atomic.Int64
	scheduled int64
	lag       Histogram // the pacing loop's alone
	wg        sync.WaitGroup
}

func (l *loader) since() time.Duration { return time.Since(l.start) }

// over reports whether the run's context has ended, or its deadline has
// passed: a dial bounded by that deadline can fail a moment before the
// context's own timer ends it, and that attempt was interrupted, not
// failed.
func (l *loader) over() bool {
	if l.ctx.Err() != nil {
		return true
	}
	dl, ok := l.ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func (l *loader) run() *Result {
	reported := make(chan struct{})
	stop := make(chan struct{})
	var rows []Second
	emit := func(ss []Second) {
		for _, s := range ss {
			rows = append(rows, s)
			if l.c.OnSecond != nil {
				l.c.OnSecond(s)
			}
		}
	}
	go func() {
		defer close(reported)
		t := time.NewTicker(reportEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				emit(l.rec.ready(l.since()))
			case <-stop:
				return
			}
		}
	}()

	end, interrupted := l.pace()
	l.wg.Wait()
	elapsed := l.since()
	close(stop)
	<-reported
	minRows := int((end + time.Second - 1) / time.Second)
	if interrupted {
		minRows = 0
	}
	emit(l.rec.flush(minRows))

	profile := l.c.Profile
	if !interrupted {
		profile.Duration = end // earlier, when Stop ended it
	}
	r := &Result{
		Profile:     profile,
		Seconds:     rows,
		Scheduled:   l.scheduled,
		Elapsed:     elapsed,
		Errors:      l.rec.errs,
		Interrupted: interrupted,
		LagP99:      l.lag.Quantile(0.99),
		LagMax:      l.lag.Max(),
		Succeeded:   l.rec.succeeded,
	}
	for i := range rows {
		r.Total.add(&rows[i])
	}
	r.Total.T = -1
	h := &l.rec.total
	r.Total.P50, r.Total.P99 = h.Quantile(0.5), h.Quantile(0.99)
	r.P90, r.P999, r.Max = h.Quantile(0.9), h.Quantile(0.999), h.Max()
	r.Span = max(l.rec.lastSend, min(end, l.c.Profile.Duration))
	return r
}

// pace sends the schedule's requests at their times: it sleeps until the
// next one is due and then sends every request due by the time it wakes.
// It returns when the schedule ended: its Duration, or the time Stop or
// the context (interrupted) ended it.
func (l *loader) pace() (end time.Duration, interrupted bool) {
	sched := l.c.Profile.Schedule()
	at, ok := sched.Next()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ok {
		if wait := at - l.since(); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.ctx.Done():
			case <-l.c.Stop:
			}
		}
		now := l.since()
		if l.ctx.Err() != nil {
			l.rec.advance(math.MaxInt64)
			return now, true
		}
		select {
		case <-l.c.Stop:
			l.rec.advance(math.MaxInt64)
			return now, false
		default:
		}
		for ok && at <= now {
			l.dispatch(at, now)
			at, ok = sched.Next()
		}
		if !ok {
			at = math.MaxInt64
		}
		l.rec.advance(at)
	}
	return l.c.Profile.Duration, false
}

// dispatch sends the first attempt of a request scheduled at, or drops it
// at the concurrency cap.
func (l *loader) dispatch(at, now time.Duration) {
	l.scheduled++
	l.lag.Record(now - at)
	if l.inflight.Add(1) > int64(l.c.ConcurrencyCap) {
		l.inflight.Add(-1)
		l.rec.drop(at, false)
		return
	}
	hdr, user := l.header()
	l.rec.send(at, now, false)
	l.wg.Add(1)
	go l.request(at, hdr, user)
}

// header returns the header of the next request, the template's or a copy
// with the drawn user and address, and the user drawn ("" for none).
func (l *loader) header() (h http.Header, user string) {
	if l.c.Users == 0 && l.c.IPs == 0 {
		return l.tmpl.Header, ""
	}
	h = l.tmpl.Header.Clone()
	if h == nil {
		h = make(http.Header, 3)
	}
	if n := l.c.Users; n > 0 {
		user = "u" + strconv.Itoa(1+l.rng.IntN(n))
		h["X-User-Id"] = []string{user}
	}
	if n := l.c.IPs; n > 0 {
		j := 1 + l.rng.IntN(n)
		h["X-Forwarded-For"] = []string{"10." + strconv.Itoa(j>>16&255) + "." + strconv.Itoa(j>>8&255) + "." + strconv.Itoa(j&255)}
	}
	return h, user
}

// userToken is UserToken's answer for user, asked once per user. It runs
// in the sending goroutines rather than the pacing loop, so that signing
// a token for each new user cannot make the loop late.
func (l *loader) userToken(user string) string {
	if t, ok := l.tokens.Load(user); ok {
		return t.(string)
	}
	t := l.c.UserToken(user)
	l.tokens.Store(user, t)
	return t
}

// request makes the attempts of one request, the first scheduled at, which
// dispatch has counted as sent and in flight.
func (l *loader) request(at time.Duration, hdr http.Header, user string) {
	defer l.wg.Done()
	if user != "" && l.c.UserToken != nil {
		hdr["Authorization"] = []string{"Bearer " + l.userToken(user)}
	}
	for try := 0; ; try++ {
		status, wait, err := l.do(hdr)
		done := l.since()
		l.inflight.Add(-1)

		o, kind, msg := classify(status), "", ""
		switch {
		case err != nil && l.over():
			o = outcomeCanceled
		case err != nil:
			o = outcomeError
			kind, msg = errorKind(err)
		case o == outcomeOther:
			kind = strconv.Itoa(status)
		}
		retryAt := time.Duration(-1)
		if try < MaxRetries && l.c.Retry != RetryNone && (o == outcomeTooMany || o == outcomeUnavailable) && l.ctx.Err() == nil {
			switch l.c.Retry {
			case RetryImmediate:
				retryAt = done
			case RetryBackoff:
				if wait < 0 {
					// ±50% jitter spreads the clients that failed
					// together over the next interval.
					d := backoffBase << try
					wait = d/2 + rand.N(d)
				}
				if wait <= maxRetryAfter {
					retryAt = done + wait
				}
			}
		}
		if l.c.OnAttempt != nil && o != outcomeCanceled {
			a := Attempt{At: at, Latency: done - at, Status: status, Retry: try > 0}
			if o == outcomeError {
				a.Status, a.Error = 0, kind
			}
			l.c.OnAttempt(a)
		}
		l.rec.finish(at, o, done-at, kind, msg, retryAt)
		if retryAt < 0 {
			return
		}

		at = retryAt
		if d := at - l.since(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				l.rec.release(at)
				return
			}
		}
		if l.ctx.Err() != nil {
			l.rec.release(at)
			return
		}
		if l.inflight.Add(1) > int64(l.c.ConcurrencyCap) {
			l.inflight.Add(-1)
			l.rec.drop(at, true)
			return
		}
		l.rec.send(at, l.since(), true)
	}
}

// do makes one attempt and returns the answer's status and its Retry-After
// (negative when absent or unreadable).
func (l *loader) do(hdr http.Header) (status int, retryAfter time.Duration, err error) {
	req := new(http.Request)
	*req = *l.tmpl // as Request.WithContext does: the URL and context are shared, read-only
	req.Header = hdr
	if l.c.Body != nil {
		req.Body = io.NopCloser(bytes.NewReader(l.c.Body))
	}
	if l.timeout > 0 {
		ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
		defer cancel()
		req = req.WithContext(ctx)
	}
	resp, err := l.send(req)
	if err != nil {
		return 0, -1, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, -1, err
	}
	return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), nil
}

// parseRetryAfter reads a Retry-After of delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3); it returns -1 when v is neither.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return -1
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}

// errorKind names an attempt's error twice: kind as a Breakdown counts
// it ("err:timeout"), msg as the summary's errors list it, by cause and
// without the URL that every one of them shares.
func errorKind(err error) (kind, msg string) {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "err:timeout", "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "err:refused", "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "err:reset", "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "err:closed", "connection closed early"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return "err:other", ue.Err.Error()
	}
	return "err:other", err.Error()
}
