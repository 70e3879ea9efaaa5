package jwtverify

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"
)

// Defaults of Options.
const (
	DefaultMaxTokenBytes = 16 << 10
	DefaultCacheEntries  = 65536
	DefaultFetchTimeout  = 5 * time.Second
)

const (
	// failureTTL is how long a failure is remembered: long enough that a
	// flood of one bad token costs one check a few times a minute, short
	// enough that nothing it says goes stale for long.
	failureTTL = 10 * time.Second
	// failureEntries bounds the failures remembered.
	failureEntries = 4096
	// maxUnnamedKeys is how many keys a token without a kid may be tried
	// against: each try is a signature check.
	maxUnnamedKeys = 4
	// maxNumericDate bounds exp and nbf, in seconds either side of the
	// epoch (about 31,000 years), so that they fit a time.Time.
	maxNumericDate = 1e12
)

// Options configure a Verifier. Exactly one of File and URL is set.
type Options struct {
	// File is a JWKS file. New fails when it cannot be read or holds no
	// usable key; afterwards the file is watched, and a change that does
	// not load is refused (and logged) while the keys loaded before go on
	// verifying.
	File string

	// URL is where a JWKS is fetched, over http or https (redirects
	// followed, a few, but never from https to http). It is fetched
	// in the background, at once and again when the copy expires by its
	// HTTP cache headers (Cache-Control max-age, Expires; revalidated with
	// ETag or Last-Modified), and when a token names a kid the set lacks,
	// at most once a minute. Until the first fetch succeeds, tokens fail
	// with NoKeys; a failed refresh keeps the keys fetched before, and is
	// retried after 1s, then 2s, up to a minute apart.
	URL string

	// Issuer, when not empty, is the iss a token must have.
	Issuer string

	// Audience, when not empty, is what a token's aud (a string, or a
	// list of them) must hold.
	Audience string

	// Leeway is the clock skew allowed on exp and nbf. Zero: none.
	Leeway time.Duration

	// MaxTokenBytes is the longest token looked at; a longer one fails
	// with TooLarge before any of it is decoded. Zero means
	// DefaultMaxTokenBytes.
	MaxTokenBytes int

	// CacheEntries bounds the verified tokens remembered. Zero means
	// DefaultCacheEntries.
	CacheEntries int

	// Client fetches URL. Nil: a client with a timeout of
	// DefaultFetchTimeout. Either way a fetch follows at most
	// maxRedirects redirects, and none from https to http; a CheckRedirect
	// of Client's own is asked after that.
	Client *http.Client

	// Logger receives a line for each key set loaded and each one
	// refused. Nil: slog.Default().
	Logger *slog.Logger
}

// Verifier verifies tokens against a JWKS. It is safe for concurrent use.
type Verifier struct {
	o       Options
	keys    atomic.Pointer[KeySet]
	cache   *cache
	log     *slog.Logger
	file    *fileSource
	remote  *remote
	stop    chan struct{}
	bg      sync.WaitGroup
	closing sync.Once
}

// New makes a Verifier and starts its background work, which Close stops.
func New(o Options) (*Verifier, error) {
	v, err := newVerifier(o)
	if err != nil {
		return nil, err
	}
	v.start()
	return v, nil
}

// newVerifier makes a Verifier whose key set is loaded (from a file) but
// whose background work has not started, so that tests can drive a URL's
// refreshes with a time of their own.
func newVerifier(o Options) (*Verifier, error) {
	switch {
	case (o.File == "") == (o.URL == ""):
		return nil, errors.New("jwtverify: give a JWKS file or a JWKS URL, one of the two")
	case o.Leeway < 0:
		return nil, fmt.Errorf("jwtverify: leeway %v is negative", o.Leeway)
	case o.MaxTokenBytes < 0 || o.CacheEntries < 0:
		return nil, errors.New("jwtverify: MaxTokenBytes and CacheEntries may not be negative")
	}
	if o.MaxTokenBytes == 0 {
		o.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if o.CacheEntries == 0 {
		o.CacheEntries = DefaultCacheEntries
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	v := &Verifier{o: o, cache: newCache(o.CacheEntries, min(failureEntries, o.CacheEntries)), log: o.Logger, stop: make(chan struct{})}
	if o.File != "" {
		v.file = &fileSource{path: o.File, v: v}
		if err := v.file.load(time.Now()); err != nil {
			return nil, fmt.Errorf("jwks_file %s: %w", o.File, err)
		}
		return v, nil
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jwtverify: %q is not an absolute http(s) URL", redact(o.URL))
	}
	client := http.Client{Timeout: DefaultFetchTimeout}
	if o.Client != nil {
		client = *o.Client
	}
	client.CheckRedirect = checkRedirect(client.CheckRedirect)
	v.remote = &remote{url: o.URL, shown: u.Redacted(), client: &client, v: v, wake: make(chan struct{}, 1)}
	return v, nil
}

func (v *Verifier) start() {
	switch {
	case v.file != nil:
		if err := v.file.watch(v.stop, &v.bg); err != nil {
			v.log.Warn("cannot watch the JWKS file; its changes are not seen until a restart",
				"jwks_file", v.o.File, "error", err.Error())
		}
	case v.remote != nil:
		v.bg.Go(func() { v.remote.run(v.stop) })
	}
}

// Close stops the background work. A closed Verifier still verifies, with
// the keys it has.
func (v *Verifier) Close() error {
	v.closing.Do(func() { close(v.stop) })
	v.bg.Wait()
	return nil
}

// setKeys installs a key set. The cache is emptied only when the keys
// differ: a refresh that brings the same set changes nothing.
func (v *Verifier) setKeys(ks *KeySet) (changed bool) {
	old := v.keys.Swap(ks)
	if old != nil && old.digest == ks.digest {
		return false
	}
	v.cache.reset()
	return true
}

// Status says why tokens may be verified less well than configured: no
// keys yet, a refresh that failed, a changed file that was refused. It is
// nil when all is well.
func (v *Verifier) Status() error {
	if v.file != nil {
		return v.file.status()
	}
	return v.remote.status()
}

// Token is a verified token. It is immutable and shared by every request
// that carries the same token.
type Token struct {
	expiry time.Time
	claims map[string]claim
}

// claim is a top-level claim as a key part reads it.
type claim struct {
	text string
	err  error // a ClaimType failure: the claim is not a string or a number
}

// Expiry is the token's exp, and false when it has none.
func (t *Token) Expiry() (time.Time, bool) { return t.expiry, !t.expiry.IsZero() }

// Claim is the value of the top-level claim name as text: a string as it
// is, a number in canonical decimal ("42" for 42, 42.0 and 4.2e1). It is
// "" with a nil error when the token has no such claim, and "" with a
// ClaimType error when the claim is an object, an array, a boolean or
// null, or a string with a lone surrogate escape.
func (t *Token) Claim(name string) (string, error) {
	c := t.claims[name]
	return c.text, c.err
}

// Verify checks token at now: its size, form, algorithm, signature and
// registered claims, and returns it verified, or an error that ReasonOf
// names the reason of.
func (v *Verifier) Verify(token string, now time.Time) (*Token, error) {
	if len(token) > v.o.MaxTokenBytes {
		return nil, fail(TooLarge, "%d bytes; at most %d are read", len(token), v.o.MaxTokenBytes)
	}
	// Sum256 only reads its argument, so it reads the string's bytes in
	// place: []byte(token) would copy them, an allocation per request (a
	// third of a kilobyte for a typical token) on the path a cache hit
	// keeps to a hash and a lookup.
	d := digest(sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token))))
	o, hit, gen := v.cache.get(&d, now)
	if hit {
		return o.t, o.err
	}
	t, until, err := v.verify(token, now)
	switch ReasonOf(err) {
	case "":
		v.cache.putGood(&d, gen, t, until)
	case NoKeys, UnknownKID:
		// Found before any signature check, so cheap to find again; and
		// remembered, an unknown kid would not make a JWKS URL refresh
		// when the minute since the last such refresh has passed.
	default:
		v.cache.putBad(&d, gen, err, min(now.Add(failureTTL).UnixNano(), until))
	}
	return t, err
}

// verify does the work of Verify that the cache saves. until is how long
// the outcome holds, in unix nanoseconds: for a token, exp plus the
// leeway; for a failure, until the token may become valid (nbf).
func (v *Verifier) verify(token string, now time.Time) (t *Token, until int64, err error) {
	until = noExpiry
	jws, err := jose.ParseSignedCompact(token, algorithms)
	if err != nil {
		var ua *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &ua) {
			return nil, until, fail(Alg, "alg %q; a token is signed with RS256, ES256, EdDSA or HS256", ua.Got)
		}
		return nil, until, fail(Malformed, "not a compact JWS: %s", trimJose(err))
	}
	h := jws.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	cands, err := v.candidates(h.KeyID, alg, now)
	if err != nil {
		return nil, until, err
	}
	var payload []byte
	for _, k := range cands {
		if payload, err = jws.Verify(k.pub); err == nil {
			break
		}
	}
	if err != nil {
		return nil, until, fail(Signature, "the signature does not verify with the %d key(s) that could have made it", len(cands))
	}
	t, nbf, err := v.claims(payload, now)
	if ReasonOf(err) == NotYetValid {
		until = nbf.Add(-v.o.Leeway).UnixNano()
	}
	if err != nil {
		return nil, until, err
	}
	if !t.expiry.IsZero() {
		until = t.expiry.Add(v.o.Leeway).UnixNano()
	}
	return t, until, nil
}

// candidates are the keys that may have signed a token with this kid and
// algorithm. A kid the set lacks makes a JWKS URL refresh, at most once a
// minute, in case the issuer has rotated its keys.
func (v *Verifier) candidates(kid string, alg jose.SignatureAlgorithm, now time.Time) ([]key, error) {
	ks := v.keys.Load()
	if ks == nil {
		return nil, fail(NoKeys, "no JWKS has loaded yet")
	}
	cands, err := ks.candidates(kid, alg)
	if ReasonOf(err) == UnknownKID && v.remote != nil && v.remote.refreshForKID(now) {
		if ks = v.keys.Load(); ks != nil {
			cands, err = ks.candidates(kid, alg)
		}
	}
	return cands, err
}

// candidates are the keys of the set that verify alg, named kid when kid
// is not empty. A key that the token names but that verifies another
// algorithm is no candidate: that is the mistake that lets a token signed
// with HMAC over an RSA public key pass as RS256's.
func (s *KeySet) candidates(kid string, alg jose.SignatureAlgorithm) ([]key, error) {
	var named, cands []key
	for _, k := range s.keys {
		if kid != "" && k.kid != kid {
			continue
		}
		named = append(named, k)
		if k.alg == alg {
			cands = append(cands, k)
		}
	}
	switch {
	case kid != "" && len(named) == 0:
		return nil, fail(UnknownKID, "no key has kid %q", kid)
	case len(cands) == 0 && kid != "":
		return nil, fail(Alg, "alg %s, but key %q verifies %s", alg, kid, named[0].alg)
	case len(cands) == 0:
		return nil, fail(Alg, "alg %s, and no key of the set verifies it", alg)
	case kid == "" && len(cands) > maxUnnamedKeys:
		return nil, fail(UnknownKID, "the token names no kid, and %d keys verify %s", len(cands), alg)
	}
	return cands, nil
}

// trimJose drops the library's prefix from its errors.
func trimJose(err error) string {
	return strings.TrimPrefix(err.Error(), "go-jose/go-jose: ")
}

// redact hides the password of a URL.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(a URL that does not parse)"
}
