package jwtverify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds of a JWKS URL's refresh schedule.
const (
	// minRefresh is the shortest time a fetched set is used before it is
	// fetched again, whatever its headers say (max-age=0, no-cache), so
	// that the gateway never polls an identity provider in a loop.
	minRefresh = time.Minute
	// defaultRefresh applies to a response with no freshness headers.
	defaultRefresh = 5 * time.Minute
	// maxRefresh is the longest, whatever the headers say.
	maxRefresh = 24 * time.Hour
	// kidRefreshEvery bounds the refreshes that tokens with an unknown
	// kid cause: a client inventing kids must not make the gateway fetch
	// the set for each.
	kidRefreshEvery = time.Minute
	// retryFirst and retryMax bound the waits after failed fetches, which
	// double from the first to the last.
	retryFirst = time.Second
	retryMax   = time.Minute
	// maxRedirects bounds the redirects a fetch follows: an identity
	// provider may move its JWKS, and has no need of a chain.
	maxRedirects = 3
)

// checkRedirect is the redirect policy of a JWKS fetch, before then, the
// client's own (nil: none). A redirect from https to http is refused: the
// keys that decide who a user is would come over a connection anyone on
// the path can rewrite, when the URL configured said they must not.
func checkRedirect(then func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if from := via[len(via)-1].URL.Scheme; from == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refused a redirect from https to %s: the keys must not come unencrypted", req.URL.Scheme)
		}
		if then != nil {
			return then(req, via)
		}
		return nil
	}
}

// remote keeps a Verifier's keys those of a JWKS URL.
type remote struct {
	url    string
	shown  string // url without its password, for messages
	client *http.Client
	v      *Verifier

	mu          sync.Mutex
	etag        string    // of the set in use, for If-None-Match
	modified    string    // its Last-Modified, for If-Modified-Since
	fetched     time.Time // when the set in use was last fetched or revalidated
	next        time.Time // when to fetch again
	err         error     // the last fetch's failure; nil after a success
	failures    int       // fetches failed in a row
	kidRefresh  time.Time // the last fetch an unknown kid caused
	inflight    chan struct{}
	lastOutcome error

	// wake tells run that a fetch of refreshForKID has set next.
	wake chan struct{}
}

// run refreshes the set whenever it is due, until stop is closed.
func (r *remote) run(stop <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.refresh(time.Now())
		case <-r.wake:
		}
		r.mu.Lock()
		next := r.next
		r.mu.Unlock()
		t.Reset(time.Until(next))
	}
}

// refreshForKID refreshes the set for a token whose kid it lacks, unless
// one such refresh happened within kidRefreshEvery of now; a fetch already
// running is waited for instead. It reports whether the set may have
// changed.
func (r *remote) refreshForKID(now time.Time) bool {
	r.mu.Lock()
	if ch := r.inflight; ch != nil {
		r.mu.Unlock()
		<-ch
		return true
	}
	if !r.kidRefresh.IsZero() && now.Sub(r.kidRefresh) < kidRefreshEvery {
		r.mu.Unlock()
		return false
	}
	r.kidRefresh = now
	r.mu.Unlock()
	r.refresh(now)
	// The schedule is run's timer, which this fetch did not reset: a
	// failure here must be retried in a second, as one of run's own is,
	// not when the set fetched before expires (up to a day), with
	// /readyz saying "refresh failed" all the while.
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// refresh fetches the set, conditionally when there is one already, and
// schedules the next fetch. Calls at once share one fetch.
func (r *remote) refresh(now time.Time) error {
	r.mu.Lock()
	if ch := r.inflight; ch != nil {
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.lastOutcome
	}
	ch := make(chan struct{})
	r.inflight = ch
	etag, modified := r.etag, r.modified
	if r.v.keys.Load() == nil {
		etag, modified = "", ""
	}
	r.mu.Unlock()

	res := r.fetch(etag, modified, now)

	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(ch)
	r.inflight = nil
	r.lastOutcome = res.err
	if res.err != nil {
		r.err = res.err
		r.failures++
		r.next = now.Add(min(retryFirst<<min(r.failures-1, 10), retryMax))
		if r.failures == 1 {
			r.logFailure(res.err)
		}
		return res.err
	}
	if r.err != nil {
		r.v.log.Info("JWKS URL answers again", "jwks_url", r.shown)
	}
	r.err, r.failures = nil, 0
	r.fetched = now
	r.next = now.Add(res.fresh)
	if res.keys != nil {
		r.etag, r.modified = res.etag, res.modified
		if r.v.setKeys(res.keys) {
			r.v.log.Info("JWKS fetched", "jwks_url", r.shown, "keys", res.keys.Len(), "skipped", res.keys.Skipped(),
				"next_refresh", res.fresh.String())
		}
	}
	return nil
}

func (r *remote) logFailure(err error) {
	if r.v.keys.Load() == nil {
		r.v.log.Error("JWKS URL gives no keys; tokens fail with no_keys until it does", "jwks_url", r.shown, "error", err.Error())
		return
	}
	r.v.log.Warn("JWKS URL refresh failed; the keys fetched before still verify", "jwks_url", r.shown, "error", err.Error())
}

// fetched is the outcome of one fetch: a new set (nil when the server
// said 304 Not Modified) and how long it stays fresh.
type fetched struct {
	keys           *KeySet
	etag, modified string
	fresh          time.Duration
	err            error
}

func (r *remote) fetch(etag, modified string, now time.Time) fetched {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return fetched{err: err}
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if modified != "" {
		req.Header.Set("If-Modified-Since", modified)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fetched{err: err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && (etag != "" || modified != ""):
		return fetched{fresh: freshness(resp.Header, now)}
	case resp.StatusCode != http.StatusOK:
		return fetched{err: fmt.Errorf("GET %s: %s", r.shown, resp.Status)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxKeySetBytes+1))
	if err != nil {
		return fetched{err: fmt.Errorf("GET %s: %w", r.shown, err)}
	}
	if len(data) > MaxKeySetBytes {
		return fetched{err: fmt.Errorf("GET %s: the JWKS is longer than %d bytes", r.shown, MaxKeySetBytes)}
	}
	ks, err := ParseKeySet(data)
	if err != nil {
		return fetched{err: fmt.Errorf("GET %s: %w", r.shown, err)}
	}
	return fetched{keys: ks, etag: resp.Header.Get("ETag"), modified: resp.Header.Get("Last-Modified"), fresh: freshness(resp.Header, now)}
}

// freshness is how long a fetched set is used before it is fetched again:
// its freshness lifetime by RFC 9111 §4.2.1 (max-age, less its Age; else
// Expires less Date), no-cache and no-store meaning none, within
// [minRefresh, maxRefresh], and defaultRefresh when the headers say
// nothing.
func freshness(h http.Header, now time.Time) time.Duration {
	life, ok := lifetime(h, now)
	if !ok {
		return defaultRefresh
	}
	return min(max(life, minRefresh), maxRefresh)
}

func lifetime(h http.Header, now time.Time) (time.Duration, bool) {
	maxAge, hasMaxAge := time.Duration(0), false
	for _, line := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(line, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-cache", "no-store":
				return 0, true
			case "max-age":
				n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
				if err != nil || n < 0 {
					return 0, true // RFC 9111 §4.2.1: an invalid max-age is stale
				}
				maxAge, hasMaxAge = time.Duration(min(n, int64(maxRefresh/time.Second)))*time.Second, true
			}
		}
	}
	if hasMaxAge {
		if age, err := strconv.ParseInt(h.Get("Age"), 10, 64); err == nil && age > 0 {
			maxAge -= time.Duration(min(age, int64(maxRefresh/time.Second))) * time.Second
		}
		return maxAge, true
	}
	if e := h.Get("Expires"); e != "" {
		exp, err := http.ParseTime(e)
		if err != nil {
			return 0, true // RFC 9111 §5.3: an invalid Expires is in the past
		}
		base := now
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			base = d
		}
		return exp.Sub(base), true
	}
	return 0, false
}

func (r *remote) status() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.v.keys.Load() == nil && r.err != nil:
		return fmt.Errorf("jwks_url %s: no keys yet, so jwt: key parts are missing: %v", r.shown, r.err)
	case r.v.keys.Load() == nil:
		return fmt.Errorf("jwks_url %s: no keys yet, so jwt: key parts are missing: the first fetch has not finished", r.shown)
	case r.err != nil:
		return fmt.Errorf("jwks_url %s: refresh failed (%v); the keys fetched at %s still verify",
			r.shown, r.err, r.fetched.UTC().Format(time.RFC3339))
	}
	return nil
}
