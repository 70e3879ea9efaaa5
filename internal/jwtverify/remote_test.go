package jwtverify

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// jwksServer is an identity provider's JWKS endpoint: it serves a set with
// the cache headers it is given, answers If-None-Match with 304, and
// counts what it was asked.
type jwksServer struct {
	*httptest.Server
	mu          sync.Mutex
	body        []byte
	etag        string
	header      http.Header
	down        bool
	gets        int
	conditional int
}

func newJWKSServer(t *testing.T, body []byte, header http.Header) *jwksServer {
	s := &jwksServer{body: body, etag: `"v1"`, header: header}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.gets++
		if s.down {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		for k, vv := range s.header {
			w.Header()[k] = vv
		}
		w.Header().Set("ETag", s.etag)
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			s.conditional++
			if inm == s.etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(body []byte, etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.etag = body, etag
}

func (s *jwksServer) counts() (gets, conditional int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.conditional
}

func urlVerifier(t *testing.T, url string) *Verifier {
	t.Helper()
	v, err := newVerifier(Options{URL: url, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The set is fetched, used while its max-age lasts, then revalidated with
// its ETag: a 304 keeps it, a new ETag brings a new set.
func TestRemoteCacheHeaders(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), http.Header{"Cache-Control": {"public, max-age=600"}})
	v := urlVerifier(t, srv.URL)
	tok := sign(t, keys.ec, claims("alice"))
	if _, err := v.Verify(tok, t0); ReasonOf(err) != NoKeys {
		t.Fatalf("before the first fetch: %v", err)
	}
	if err := v.Status(); err == nil || !strings.Contains(err.Error(), "no keys yet") {
		t.Errorf("Status before the first fetch: %v", err)
	}
	if err := v.remote.refresh(t0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
	if next := v.remote.next; !next.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("next refresh %v, want max-age 600s after t0", next.Sub(t0))
	}
	if err := v.remote.refresh(t0.Add(10 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if gets, cond := srv.counts(); gets != 2 || cond != 1 {
		t.Errorf("%d fetches, %d conditional; want 2, 1", gets, cond)
	}
	if _, err := v.Verify(tok, t0); err != nil {
		t.Errorf("after a 304: %v", err)
	}

	srv.set(jwks(t, keys.ed), `"v2"`)
	if err := v.remote.refresh(t0.Add(20 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := v.Verify(tok, t0)
	wantReason(t, err, UnknownKID)
	if _, err := v.Verify(sign(t, keys.ed, claims("bob")), t0); err != nil {
		t.Errorf("the new set's key: %v", err)
	}
}

// A refresh that fails keeps the keys fetched before, and Status says so;
// the next attempt comes sooner than the set's max-age.
func TestRemoteRefreshFails(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), http.Header{"Cache-Control": {"max-age=3600"}})
	v := urlVerifier(t, srv.URL)
	if err := v.remote.refresh(t0); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	srv.down = true
	srv.mu.Unlock()
	if err := v.remote.refresh(t0.Add(time.Hour)); err == nil {
		t.Fatal("a 503 refreshed")
	}
	if _, err := v.Verify(sign(t, keys.ec, claims("alice")), t0); err != nil {
		t.Errorf("after a failed refresh: %v", err)
	}
	if err := v.Status(); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "still verify") {
		t.Errorf("Status: %v", err)
	}
	if wait := v.remote.next.Sub(t0.Add(time.Hour)); wait != retryFirst {
		t.Errorf("retry after %v, want %v", wait, retryFirst)
	}
	v.remote.refresh(t0.Add(time.Hour + time.Second))
	if wait := v.remote.next.Sub(t0.Add(time.Hour + time.Second)); wait != 2*retryFirst {
		t.Errorf("second retry after %v, want %v", wait, 2*retryFirst)
	}
	srv.mu.Lock()
	srv.down = false
	srv.mu.Unlock()
	if err := v.remote.refresh(t0.Add(2 * time.Hour)); err != nil || v.Status() != nil {
		t.Errorf("back: %v, status %v", err, v.Status())
	}
}

// A token whose kid the set lacks refreshes the set, so that a rotation
// at the issuer is seen at once; but at most once a minute, so that
// invented kids cannot make the gateway fetch for every request.
func TestRemoteUnknownKID(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), http.Header{"Cache-Control": {"max-age=86400"}})
	v := urlVerifier(t, srv.URL)
	if err := v.remote.refresh(t0); err != nil {
		t.Fatal(err)
	}
	rotated, err := jwtsign.Generate("ES256", "ec-2")
	if err != nil {
		t.Fatal(err)
	}
	srv.set(jwks(t, keys.ec, rotated), `"v2"`)
	if _, err := v.Verify(sign(t, rotated, claims("alice")), t0.Add(time.Second)); err != nil {
		t.Fatalf("the rotated key's token: %v", err)
	}
	if gets, _ := srv.counts(); gets != 2 {
		t.Fatalf("%d fetches, want 2", gets)
	}

	again, err := jwtsign.Generate("ES256", "ec-3")
	if err != nil {
		t.Fatal(err)
	}
	srv.set(jwks(t, keys.ec, rotated, again), `"v3"`)
	tok := sign(t, again, claims("bob"))
	_, err = v.Verify(tok, t0.Add(time.Second+59*time.Second))
	wantReason(t, err, UnknownKID)
	if gets, _ := srv.counts(); gets != 2 {
		t.Errorf("%d fetches within a minute of the last, want 2", gets)
	}
	// A minute after the last such refresh, the next may go.
	if _, err := v.Verify(tok, t0.Add(time.Second+time.Minute)); err != nil {
		t.Errorf("a minute later: %v", err)
	}
	if gets, _ := srv.counts(); gets != 3 {
		t.Errorf("%d fetches, want 3", gets)
	}
}

// A JWKS URL that is down when the gateway starts: New still works, tokens
// fail with no_keys, and Status says why; when the URL answers, the
// background refresh finds the keys.
func TestRemoteDownAtStart(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), nil)
	srv.mu.Lock()
	srv.down = true
	srv.mu.Unlock()
	v, err := New(Options{URL: srv.URL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := v.Status(); err != nil && strings.Contains(err.Error(), "503") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status %v", v.Status())
		}
	}
	tok := sign(t, keys.ec, claims("alice"))
	_, err = v.Verify(tok, t0)
	wantReason(t, err, NoKeys)
	srv.mu.Lock()
	srv.down = false
	srv.mu.Unlock()
	// The background retry comes a second after the failure, then two.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := v.Verify(tok, t0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no keys after the URL came back: %v", v.Status())
		}
	}
	if err := v.Status(); err != nil {
		t.Errorf("Status: %v", err)
	}
}

func TestFreshness(t *testing.T) {
	date := t0.Format(http.TimeFormat)
	for _, tt := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", nil, defaultRefresh},
		{"max-age", http.Header{"Cache-Control": {"public, max-age=3600"}}, time.Hour},
		{"max-age less Age", http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"600"}}, 50 * time.Minute},
		{"max-age before Expires", http.Header{"Cache-Control": {"max-age=600"}, "Expires": {t0.Add(time.Hour).Format(http.TimeFormat)}}, 10 * time.Minute},
		{"Expires less Date", http.Header{"Date": {date}, "Expires": {t0.Add(2 * time.Hour).Format(http.TimeFormat)}}, 2 * time.Hour},
		{"Expires without Date", http.Header{"Expires": {t0.Add(3 * time.Hour).Format(http.TimeFormat)}}, 3 * time.Hour},
		{"invalid Expires", http.Header{"Expires": {"0"}}, minRefresh},
		{"no-cache", http.Header{"Cache-Control": {"no-cache"}}, minRefresh},
		{"no-store beside max-age", http.Header{"Cache-Control": {"max-age=600, no-store"}}, minRefresh},
		{"max-age=0", http.Header{"Cache-Control": {"max-age=0"}}, minRefresh},
		{"invalid max-age", http.Header{"Cache-Control": {"max-age=soon"}}, minRefresh},
		{"a year", http.Header{"Cache-Control": {"max-age=31536000"}}, maxRefresh},
		{"two lines", http.Header{"Cache-Control": {"public", "max-age=120"}}, 2 * time.Minute},
	} {
		if got := freshness(tt.header, t0); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A JWKS URL may redirect, a few times, and from http to https or within
// https; never from https to http, where anyone on the path could put in
// keys of their own, and the refresh error says why.
func TestRemoteRedirects(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), nil)
	var loops atomic.Int64
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/jwks":
			w.Write(jwks(t, keys.ec))
		case "/moved":
			http.Redirect(w, r, "/jwks", http.StatusFound)
		case "/to-http":
			http.Redirect(w, r, srv.URL+"/jwks", http.StatusMovedPermanently)
		case "/loop":
			loops.Add(1)
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		}
	}))
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, tlsSrv.URL+"/moved", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(plain.Close)

	fetch := func(url string) (*Verifier, error) {
		v, err := newVerifier(Options{URL: url, Client: tlsSrv.Client(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return v, v.remote.refresh(t0)
	}
	for _, url := range []string{tlsSrv.URL + "/moved", plain.URL + "/to-tls"} {
		if _, err := fetch(url); err != nil {
			t.Errorf("%s: %v", url, err)
		}
	}

	v, err := fetch(tlsSrv.URL + "/to-http")
	if err == nil || !strings.Contains(err.Error(), "refused a redirect from https to http") {
		t.Errorf("https to http: %v", err)
	}
	if gets, _ := srv.counts(); gets != 0 {
		t.Errorf("the http URL was fetched %d times", gets)
	}
	if err := v.Status(); err == nil || !strings.Contains(err.Error(), "no keys yet") || !strings.Contains(err.Error(), "from https to http") {
		t.Errorf("Status: %v", err)
	}

	if _, err := fetch(tlsSrv.URL + "/loop"); err == nil || !strings.Contains(err.Error(), "stopped after 3 redirects") {
		t.Errorf("a redirect loop: %v", err)
	}
	if n := loops.Load(); n != 1+maxRedirects {
		t.Errorf("a redirect loop: %d requests, want %d", n, 1+maxRedirects)
	}
}

// A refresh that a token's unknown kid caused and that failed is retried
// by the background schedule a second later, as a failed scheduled one
// is, rather than when the set fetched before expires (a day here); once
// the URL answers, Status is clear again.
func TestRemoteKIDRefreshFails(t *testing.T) {
	srv := newJWKSServer(t, jwks(t, keys.ec), http.Header{"Cache-Control": {"max-age=86400"}})
	v, err := New(Options{URL: srv.URL, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s; Status %v", what, v.Status())
			}
		}
	}
	eventually("the first fetch", func() bool { return v.keys.Load() != nil })

	srv.mu.Lock()
	srv.down = true
	srv.mu.Unlock()
	rotated, err := jwtsign.Generate("ES256", "ec-rotated")
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(sign(t, rotated, claims("alice")), time.Now())
	wantReason(t, err, UnknownKID)
	if err := v.Status(); err == nil || !strings.Contains(err.Error(), "refresh failed") {
		t.Fatalf("Status after the failed refresh: %v", err)
	}
	if gets, _ := srv.counts(); gets != 2 {
		t.Fatalf("%d fetches, want 2", gets)
	}

	srv.mu.Lock()
	srv.down = false
	srv.mu.Unlock()
	eventually("Status clear after the retry", func() bool { return v.Status() == nil })
	if gets, _ := srv.counts(); gets != 3 {
		t.Errorf("%d fetches, want 3: the first, the kid's, the retry", gets)
	}
}
