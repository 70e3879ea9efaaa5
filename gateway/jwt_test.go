package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

const (
	testIssuer   = "https://login.example.com/"
	testAudience = "lucky-meal"
)

// jwtKeys are one key of each type, made once.
var jwtKeys = func() map[string]*jwtsign.Key {
	m := map[string]*jwtsign.Key{}
	for _, alg := range []string{"RS256", "ES256", "EdDSA", "HS256"} {
		k, err := jwtsign.Generate(alg, "key-"+alg)
		if err != nil {
			panic(err)
		}
		m[alg] = k
	}
	return m
}()

// jwksOf is the JSON of a JWKS holding the keys' verifying halves.
func jwksOf(t *testing.T, ks ...*jwtsign.Key) []byte {
	t.Helper()
	b, err := jwtsign.PublicJWKS(ks...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// token signs claims for sub with k, valid for an hour, for testIssuer
// and testAudience; extra claims are added or, when nil, removed.
func token(t *testing.T, k *jwtsign.Key, sub string, extra map[string]any) string {
	t.Helper()
	c := map[string]any{"iss": testIssuer, "aud": testAudience, "sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	for name, v := range extra {
		if v == nil {
			delete(c, name)
		} else {
			c[name] = v
		}
	}
	tok, err := k.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// jwtConfig is a gateway whose limits read jwt: parts, with server.jwt
// given by jwt (a YAML flow mapping's inside).
func jwtConfig(jwt string) string {
	return `
admin: {listen: ""}
server:
  trusted_proxies: [127.0.0.1]
  jwt: {` + jwt + `, issuer: "` + testIssuer + `", audience: ` + testAudience + `}
routes:
  - id: user
    match: {path: /user}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: per-user
        key: [jwt:sub]
        fallback: [ip]
        rate: 1/min
        overrides:
          - claim: {name: tier, value: vip}
            rate: 3/min
      - name: per-user-path
        key: [jwt:sub, path]
        on_missing: allow
        rate: 100/min
  - id: strict
    match: {path: /strict}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: per-user
        key: [jwt:sub]
        rate: 1/min
  - id: level
    match: {path: /level}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: per-level
        key: [jwt:level]
        on_missing: allow
        rate: 1/min
  - id: anonymous
    match: {path: /anonymous}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: per-ip
        key: [ip]
        rate: 100/min
`
}

// jwtFileHarness is a gateway with jwtConfig over a JWKS file of ks.
func jwtFileHarness(t *testing.T, ks ...*jwtsign.Key) (*harness, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, file, jwksOf(t, ks...))
	return newHarness(t, jwtConfig("jwks_file: "+file), newBackend(t, nil)), file
}

// remaining is what a limit's key has left, as the admin API reads it.
func (h *harness) remaining(route, name string, fallback bool, values ...string) int64 {
	h.t.Helper()
	st, err := h.gw.LimitState(context.Background(), route, name, values, fallback)
	if err != nil {
		h.t.Fatal(err)
	}
	return st.Remaining
}

func (h *harness) status(path string, hdr map[string]string) int {
	h.t.Helper()
	resp := h.do("POST", path, hdr, nil)
	drain(resp)
	return resp.StatusCode
}

func (h *harness) jwtFailures(reason jwtverify.Reason) float64 {
	return counterValue(h.t, h, "gateway_jwt_failures_total", map[string]string{"reason": string(reason)})
}

// A verified token's sub is the user's key, whatever algorithm signed it;
// the fallback key is not touched.
func TestJWTKeyEachAlgorithm(t *testing.T) {
	t.Parallel()
	var ks []*jwtsign.Key
	for _, k := range jwtKeys {
		ks = append(ks, k)
	}
	h, _ := jwtFileHarness(t, ks...)
	for alg, k := range jwtKeys {
		t.Run(alg, func(t *testing.T) {
			sub := "alice-" + alg
			hdr := bearer(token(t, k, sub, nil))
			hdr["X-Forwarded-For"] = "10.1.1.1"
			if got := h.status("/user", hdr); got != 200 {
				t.Fatalf("first request: %d", got)
			}
			if got := h.status("/user", hdr); got != 429 {
				t.Fatalf("second request of %s: %d, want 429", sub, got)
			}
			if r := h.remaining("user", "per-user", false, sub); r != 0 {
				t.Errorf("%s has %d left, want 0", sub, r)
			}
			if r := h.remaining("user", "per-user-path", false, sub, "/user"); r != 99 {
				t.Errorf("%s on /user has %d left, want 99 (the rejected request took none)", sub, r)
			}
			if r := h.remaining("user", "per-user", true, "10.1.1.1"); r != 1 {
				t.Errorf("the fallback ip key has %d left, want 1 (untouched)", r)
			}
		})
	}
	for _, reason := range jwtverify.Reasons() {
		if n := h.jwtFailures(reason); n != 0 {
			t.Errorf("%s: %v failures", reason, n)
		}
	}
}

// A token that fails, for any reason, makes its parts missing: the
// fallback (ip) counts the request, a limit without one answers 403
// key_required, and the failure is counted by its reason, once per
// request, however many parts and overrides read the token.
func TestJWTFailuresAreMissing(t *testing.T) {
	t.Parallel()
	rsa, ec := jwtKeys["RS256"], jwtKeys["ES256"]
	h, _ := jwtFileHarness(t, rsa, ec)
	// The failures fall in one second of the gateway's, whose log lines
	// are counted below, however long the machine takes to send them.
	h.clock.Freeze()
	stranger, err := jwtsign.Generate("ES256", "key-ES256") // a known kid, another key
	if err != nil {
		t.Fatal(err)
	}
	good := token(t, ec, "mallory", nil)
	parts := strings.Split(good, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	claims := b64([]byte(`{"iss":"` + testIssuer + `","aud":"` + testAudience + `","sub":"mallory"}`))
	hmacOver := func(header string, secret []byte) string {
		in := b64([]byte(header)) + "." + claims
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(in))
		return in + "." + b64(m.Sum(nil))
	}
	rsaPEM := rsaPublicPEM(t, rsa)

	for i, tt := range []struct {
		name   string
		token  string
		reason jwtverify.Reason
	}{
		{"expired", token(t, ec, "mallory", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}), jwtverify.Expired},
		{"not yet valid", token(t, ec, "mallory", map[string]any{"nbf": time.Now().Add(time.Hour).Unix()}), jwtverify.NotYetValid},
		{"another issuer", token(t, ec, "mallory", map[string]any{"iss": "https://evil.example.com/"}), jwtverify.Issuer},
		{"another audience", token(t, ec, "mallory", map[string]any{"aud": []string{"checkout"}}), jwtverify.Audience},
		{"another key", token(t, stranger, "mallory", nil), jwtverify.Signature},
		{"tampered", parts[0] + "." + claims + "." + parts[2], jwtverify.Signature},
		{"alg none", b64([]byte(`{"alg":"none"}`)) + "." + claims + ".", jwtverify.Alg},
		{"HS256 over the RSA public key", hmacOver(`{"alg":"HS256","kid":"key-RS256"}`, rsaPEM), jwtverify.Alg},
		{"unknown kid", token(t, jwtKeys["EdDSA"], "mallory", nil), jwtverify.UnknownKID},
		{"not a JWT", "hello", jwtverify.Malformed},
		{"20 KB", strings.Repeat("x", 20<<10), jwtverify.TooLarge},
		{"sub an object", token(t, ec, "", map[string]any{"sub": map[string]any{"id": "alice"}}), jwtverify.ClaimType},
		{"sub an array", token(t, ec, "", map[string]any{"sub": []string{"alice", "bob"}}), jwtverify.ClaimType},
		{"sub a boolean", token(t, ec, "", map[string]any{"sub": true}), jwtverify.ClaimType},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ip := "10.2.0." + string(rune('1'+i%9)) + string(rune('0'+i/9))
			before := h.jwtFailures(tt.reason)
			hdr := bearer(tt.token)
			hdr["X-Forwarded-For"] = ip
			if got := h.status("/user", hdr); got != 200 {
				t.Fatalf("/user: %d", got)
			}
			if r := h.remaining("user", "per-user", true, ip); r != 0 {
				t.Errorf("the fallback key %s has %d left; want the request counted there", ip, r)
			}
			if r := h.remaining("user", "per-user", false, "mallory"); r != 1 {
				t.Errorf("mallory's key has %d left: the token made a key", r)
			}
			answerOf(t, h.do("POST", "/strict", hdr, nil), 403, "key_required")
			if got := h.jwtFailures(tt.reason) - before; got != 2 {
				t.Errorf("%s counted %v times for two requests, want 2", tt.reason, got)
			}
		})
	}
	// The failures are logged, five lines a second.
	if lines := strings.Count(h.log.String(), "bearer token not accepted"); lines != 5 {
		t.Errorf("%d failure lines logged for 28 failures in one second, want 5", lines)
	}
	if !strings.Contains(h.log.String(), `"reason":"expired"`) {
		t.Errorf("the log does not name the reason:\n%s", h.log.String())
	}
}

// rsaPublicPEM is an RSA key's public half as PEM: what anyone may read,
// and what an HMAC confusion attack signs with.
func rsaPublicPEM(t *testing.T, k *jwtsign.Key) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(jwksOf(t, k), &set); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(set.Keys[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// A claim override matches the verified token's claim; a number claim is
// one key however it is written; a route that reads no jwt: part never
// looks at the token.
func TestJWTClaims(t *testing.T) {
	t.Parallel()
	ed := jwtKeys["EdDSA"]
	h, _ := jwtFileHarness(t, ed)
	vip := bearer(token(t, ed, "victoria", map[string]any{"tier": "vip"}))
	for i := range 3 {
		if got := h.status("/user", vip); got != 200 {
			t.Fatalf("vip request %d: %d (the override allows 3 a minute)", i+1, got)
		}
	}
	if got := h.status("/user", vip); got != 429 {
		t.Errorf("fourth vip request: %d", got)
	}
	// The same tier claim in an unverified token matches nothing.
	forged := bearer(token(t, jwtKeys["HS256"], "victoria", map[string]any{"tier": "vip"}))
	forged["X-Forwarded-For"] = "10.3.0.1"
	if got := h.status("/user", forged); got != 200 || h.remaining("user", "per-user", true, "10.3.0.1") != 0 {
		t.Errorf("a forged vip: %d", got)
	}

	if got := h.status("/level", bearer(token(t, ed, "a", map[string]any{"level": 3.0}))); got != 200 {
		t.Fatalf("level 3.0: %d", got)
	}
	raw := signRawEdDSA(t, ed, `{"iss":"`+testIssuer+`","aud":"`+testAudience+`","sub":"b","level":3e0}`)
	if got := h.status("/level", bearer(raw)); got != 429 {
		t.Errorf("level 3e0 after 3.0: %d, want 429 (one key, \"3\")", got)
	}
	if r := h.remaining("level", "per-level", false, "3"); r != 0 {
		t.Errorf(`key "3" has %d left`, r)
	}
	// A claim of the wrong type is missing, and on_missing allow lets the
	// request through unlimited.
	before := h.jwtFailures(jwtverify.ClaimType)
	for range 2 {
		if got := h.status("/level", bearer(token(t, ed, "c", map[string]any{"level": []int{3}}))); got != 200 {
			t.Errorf("level [3]: %d", got)
		}
	}
	if got := h.jwtFailures(jwtverify.ClaimType) - before; got != 2 {
		t.Errorf("claim_type counted %v times, want 2", got)
	}

	before = h.jwtFailures(jwtverify.Malformed)
	if got := h.status("/anonymous", bearer("not a token")); got != 200 {
		t.Errorf("/anonymous: %d", got)
	}
	if got := h.jwtFailures(jwtverify.Malformed) - before; got != 0 {
		t.Errorf("a route without jwt: parts verified the token (%v failures counted)", got)
	}
}

// signRawEdDSA signs a payload written by hand, numbers as they are.
func signRawEdDSA(t *testing.T, k *jwtsign.Key, payload string) string {
	t.Helper()
	priv, err := k.PrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	var jwk jose.JSONWebKey
	if err := json.Unmarshal(priv, &jwk); err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jwk}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The token is where server.jwt.from says: a header's Bearer value (any
// case), or a cookie. Authorization with another scheme carries no token,
// and no token is no failure.
func TestJWTFrom(t *testing.T) {
	t.Parallel()
	ec := jwtKeys["ES256"]
	tok := token(t, ec, "alice", nil)
	up := newBackend(t, nil)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, file, jwksOf(t, ec))
	for _, tt := range []struct {
		from string
		hdr  map[string]string
		sub  string
	}{
		{"header:Authorization", map[string]string{"Authorization": "Bearer " + tok}, "alice"},
		{"header:Authorization", map[string]string{"Authorization": "bearer   " + tok}, "alice"},
		{"header:Authorization", map[string]string{"Authorization": "Basic YWxpY2U6cHc="}, ""},
		{"header:Authorization", map[string]string{"Authorization": tok}, ""},
		{"header:X-Token", map[string]string{"X-Token": tok}, "alice"},
		{"header:X-Token", map[string]string{"X-Token": "Bearer " + tok}, "alice"},
		{"header:X-Token", map[string]string{"Authorization": "Bearer " + tok}, ""},
		{"cookie:session", map[string]string{"Cookie": "theme=dark; session=" + tok}, "alice"},
		{"cookie:session", map[string]string{"Authorization": "Bearer " + tok}, ""},
	} {
		h := newHarness(t, jwtConfig(`jwks_file: `+file+`, from: "`+tt.from+`"`), up)
		tt.hdr["X-Forwarded-For"] = "10.4.0.1"
		if got := h.status("/user", tt.hdr); got != 200 {
			t.Fatalf("%s %v: %d", tt.from, tt.hdr, got)
		}
		if tt.sub != "" && h.remaining("user", "per-user", false, tt.sub) != 0 {
			t.Errorf("from %s with %v: not counted under %s", tt.from, tt.hdr, tt.sub)
		}
		if tt.sub == "" && h.remaining("user", "per-user", true, "10.4.0.1") != 0 {
			t.Errorf("from %s with %v: not counted under the fallback", tt.from, tt.hdr)
		}
		for _, reason := range jwtverify.Reasons() {
			if n := h.jwtFailures(reason); n != 0 {
				t.Errorf("from %s with %v: %v %s failures", tt.from, tt.hdr, n, reason)
			}
		}
	}
}

// A request that carries its token more than once (the header twice, the
// cookie twice, in one Cookie line or two) has none: the gateway forwards
// them all, and an upstream that reads another than the first would act
// for another user than the one counted. It counts as ambiguous. Other
// headers and cookies may come as they like, and a token cookie beside
// others in Cookie lines of their own (as HTTP/2 sends them) is read.
func TestJWTAmbiguous(t *testing.T) {
	t.Parallel()
	ec := jwtKeys["ES256"]
	alice, bob := token(t, ec, "alice", nil), token(t, ec, "bob", nil)
	up := newBackend(t, nil)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, file, jwksOf(t, ec))
	type header struct{ name, value string }
	for i, tt := range []struct {
		from      string
		hdr       []header
		ambiguous bool
	}{
		{"header:Authorization", []header{{"Authorization", "Bearer " + alice}, {"Authorization", "Bearer " + bob}}, true},
		{"header:Authorization", []header{{"Authorization", "Bearer " + alice}, {"authorization", "Bearer " + alice}}, true},
		{"header:Authorization", []header{{"Authorization", "Basic YWxpY2U6cHc="}, {"Authorization", "Bearer " + bob}}, true},
		{"header:Authorization", []header{{"Authorization", "Bearer " + alice}, {"X-Token", "a"}, {"X-Token", "b"}}, false},
		{"header:X-Token", []header{{"X-Token", alice}, {"X-Token", bob}}, true},
		{"header:X-Token", []header{{"X-Token", alice}, {"Authorization", "Bearer " + bob}}, false},
		{"cookie:session", []header{{"Cookie", "session=" + alice + "; session=" + bob}}, true},
		{"cookie:session", []header{{"Cookie", "session=" + alice}, {"Cookie", "theme=dark; session=" + bob}}, true},
		{"cookie:session", []header{{"Cookie", "session=" + alice + "; session=\"not\\net/http's\""}}, true},
		{"cookie:session", []header{{"Cookie", "theme=dark"}, {"Cookie", "session=" + alice}, {"Cookie", "lang=en; sessionid=1"}}, false},
	} {
		h := newHarness(t, jwtConfig(`jwks_file: `+file+`, from: "`+tt.from+`"`), up)
		req, err := http.NewRequest("POST", h.srv.URL+"/user", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", "10.4.0.2")
		for _, hv := range tt.hdr {
			req.Header[http.CanonicalHeaderKey(hv.name)] = append(req.Header[http.CanonicalHeaderKey(hv.name)], hv.value)
		}
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if resp.StatusCode != 200 {
			t.Fatalf("case %d, from %s: %d", i, tt.from, resp.StatusCode)
		}
		ambiguous, fallback := h.jwtFailures(jwtverify.Ambiguous), h.remaining("user", "per-user", true, "10.4.0.2") == 0
		users := h.remaining("user", "per-user", false, "alice") + h.remaining("user", "per-user", false, "bob")
		switch {
		case tt.ambiguous && (ambiguous != 1 || !fallback || users != 2):
			t.Errorf("case %d, from %s: %v ambiguous, the fallback counted %v, users left %d; want 1, true, 2",
				i, tt.from, ambiguous, fallback, users)
		case !tt.ambiguous && (ambiguous != 0 || fallback || users != 1):
			t.Errorf("case %d, from %s: %v ambiguous, the fallback counted %v, users left %d; want 0, false, 1 (one counted)",
				i, tt.from, ambiguous, fallback, users)
		}
	}
}

// The JWKS file is watched: a new key verifies once it is written, a
// broken file keeps the keys before it and /readyz's detail says so.
func TestJWTFileReload(t *testing.T) {
	t.Parallel()
	ec, ed := jwtKeys["ES256"], jwtKeys["EdDSA"]
	h, file := jwtFileHarness(t, ec)
	counted := func(sub string) bool { return h.remaining("user", "per-user-path", false, sub, "/user") < 100 }
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(25 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
		}
	}
	h.status("/user", bearer(token(t, ec, "alice", nil)))
	if !counted("alice") {
		t.Fatal("the first key's token")
	}

	writeFile(t, file, jwksOf(t, ec, ed))
	eventually("a new key verifies", func() bool {
		h.status("/user", bearer(token(t, ed, "bob", nil)))
		return counted("bob")
	})

	writeFile(t, file, []byte(`{"keys": "not a list"}`))
	eventually("the broken file is said", func() bool { return strings.Contains(h.gw.Degraded(), "refused") })
	if d := h.gw.Degraded(); !strings.Contains(d, "server.jwt: jwks_file") || !strings.Contains(d, "still verify") {
		t.Errorf("Degraded: %q", d)
	}
	h.status("/user", bearer(token(t, ed, "carol", nil)))
	if !counted("carol") {
		t.Error("a broken file dropped the keys before it")
	}
	if !strings.Contains(h.log.String(), "JWKS file changed but does not load") {
		t.Errorf("no log line says the file was refused:\n%s", h.log.String())
	}
}

// jwksEndpoint is an identity provider's JWKS URL.
type jwksEndpoint struct {
	*httptest.Server
	mu   sync.Mutex
	body []byte
	etag string
	down bool
	gets int
}

func newJWKSEndpoint(t *testing.T, body []byte) *jwksEndpoint {
	e := &jwksEndpoint{body: body, etag: `"1"`}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.gets++
		if e.down {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", e.etag)
		if r.Header.Get("If-None-Match") == e.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write(e.body)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *jwksEndpoint) serve(body []byte, etag string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.body, e.etag, e.down = body, etag, false
}

func (e *jwksEndpoint) fetches() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gets
}

// A JWKS URL: its keys verify once fetched; a token naming a key the set
// lacks refreshes it at once (the issuer rotated its keys), but at most
// once a minute.
func TestJWTURL(t *testing.T) {
	t.Parallel()
	ec := jwtKeys["ES256"]
	idp := newJWKSEndpoint(t, jwksOf(t, ec))
	h := newHarness(t, jwtConfig(`jwks_url: "`+idp.URL+`"`), newBackend(t, nil))
	counted := func(sub string) bool { return h.remaining("user", "per-user-path", false, sub, "/user") < 100 }
	for deadline := time.Now().Add(5 * time.Second); h.gw.Degraded() != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no keys: %s", h.gw.Degraded())
		}
	}
	h.status("/user", bearer(token(t, ec, "alice", nil)))
	if !counted("alice") || idp.fetches() != 1 {
		t.Fatalf("alice counted %v, %d fetches", counted("alice"), idp.fetches())
	}

	rotated, _ := jwtsign.Generate("ES256", "rotated-1")
	idp.serve(jwksOf(t, ec, rotated), `"2"`)
	h.status("/user", bearer(token(t, rotated, "bob", nil)))
	if !counted("bob") || idp.fetches() != 2 {
		t.Errorf("the rotated key's token: counted %v, %d fetches, want 2", counted("bob"), idp.fetches())
	}

	again, _ := jwtsign.Generate("ES256", "rotated-2")
	idp.serve(jwksOf(t, ec, rotated, again), `"3"`)
	before := h.jwtFailures(jwtverify.UnknownKID)
	for range 5 {
		h.status("/user", bearer(token(t, again, "carol", nil)))
	}
	if counted("carol") || idp.fetches() != 2 {
		t.Errorf("within a minute of the last refresh: counted %v, %d fetches; want neither", counted("carol"), idp.fetches())
	}
	if got := h.jwtFailures(jwtverify.UnknownKID) - before; got != 5 {
		t.Errorf("unknown_kid counted %v times, want 5", got)
	}
}

// A JWKS URL that is down when the gateway starts: it serves, jwt: parts
// are missing (the fallback applies), and Degraded, which /readyz shows
// as its detail, says why.
func TestJWTURLDownAtStart(t *testing.T) {
	t.Parallel()
	ec := jwtKeys["ES256"]
	idp := newJWKSEndpoint(t, jwksOf(t, ec))
	idp.mu.Lock()
	idp.down = true
	idp.mu.Unlock()
	h := newHarness(t, jwtConfig(`jwks_url: "`+idp.URL+`"`), newBackend(t, nil))
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(h.gw.Degraded(), "503"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Degraded: %q", h.gw.Degraded())
		}
	}
	if d := h.gw.Degraded(); !strings.Contains(d, "no keys yet") {
		t.Errorf("Degraded: %q", d)
	}
	if err := h.gw.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v (a missing key part is no reason to take the gateway out)", err)
	}
	hdr := bearer(token(t, ec, "alice", nil))
	hdr["X-Forwarded-For"] = "10.5.0.1"
	if got := h.status("/user", hdr); got != 200 || h.remaining("user", "per-user", true, "10.5.0.1") != 0 {
		t.Errorf("with no keys: %d, not counted under the fallback", got)
	}
	if n := h.jwtFailures(jwtverify.NoKeys); n != 1 {
		t.Errorf("no_keys counted %v times", n)
	}

	idp.serve(jwksOf(t, ec), `"1"`)
	for deadline := time.Now().Add(10 * time.Second); h.gw.Degraded() != ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the URL came back, the keys did not: %q", h.gw.Degraded())
		}
	}
	h.status("/user", bearer(token(t, ec, "alice", nil)))
	if h.remaining("user", "per-user", false, "alice") != 0 {
		t.Error("alice's token after the keys arrived")
	}
}

// A reload keeps the verifier, with its keys and its cache, while
// server.jwt is the same; a changed server.jwt gets a new one.
func TestJWTReload(t *testing.T) {
	t.Parallel()
	ec := jwtKeys["ES256"]
	h, file := jwtFileHarness(t, ec)
	verifier := func() *jwtverify.Verifier { return h.gw.gen.Load().jwt.v }
	first := verifier()
	reload := func(yaml string) {
		t.Helper()
		if err := h.gw.Reload(mustParseT(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(jwtConfig("jwks_file: "+file), "rate: 100/min", "rate: 200/min", 1))
	if verifier() != first {
		t.Error("a reload that left server.jwt alone made a new verifier")
	}
	reload(jwtConfig("jwks_file: " + file + ", leeway: 5s"))
	if verifier() == first {
		t.Error("a reload that changed server.jwt kept the verifier")
	}
	// Without server.jwt, and without jwt: parts.
	reload("admin: {listen: \"\"}\n" + okRoute)
	if h.gw.gen.Load().jwt != nil {
		t.Error("a config without server.jwt has a token reader")
	}

	// A JWKS file that does not load refuses the config, at its line.
	writeFile(t, file, []byte("{"))
	cfg := mustParseT(t, jwtConfig("jwks_file: "+file))
	err := h.gw.Reload(cfg)
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != 5 || !strings.Contains(errs[0].Msg, "server.jwt.jwks_file: ") || !strings.Contains(errs[0].Msg, "not JSON") {
		t.Errorf("reload with a broken JWKS file: %v", err)
	}
	os.Remove(file)
	if _, err := New(cfg, Options{Logger: discardLogger()}); err == nil || !strings.Contains(err.Error(), "test.yaml:5: server.jwt.jwks_file: \""+file+"\" cannot be read: no such file or directory") {
		t.Errorf("New with a missing JWKS file: %v", err)
	}
}

func TestCheckJWKSFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	cfg := mustParseT(t, jwtConfig("jwks_file: "+file))
	if _, err := CheckJWKSFile(cfg); err == nil || !strings.Contains(err.Error(), "test.yaml:5: server.jwt.jwks_file: \""+file+"\" cannot be read") {
		t.Errorf("missing: %v", err)
	}
	writeFile(t, file, []byte(`{"keys": [{"kty": "EC", "crv": "P-384", "kid": "big"}]}`))
	if _, err := CheckJWKSFile(cfg); err == nil || !strings.Contains(err.Error(), "no usable key") {
		t.Errorf("no usable key: %v", err)
	}
	var set map[string][]json.RawMessage
	json.Unmarshal(jwksOf(t, jwtKeys["ES256"]), &set)
	writeFile(t, file, []byte(`{"keys": [{"kty": "XYZ", "kid": "odd"}, `+string(set["keys"][0])+`]}`))
	warnings, err := CheckJWKSFile(cfg)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0].Warning(), `test.yaml:5: warning: server.jwt.jwks_file: "`+file+`": skipped key 1 (kid "odd", kty "XYZ"): unsupported key type`) {
		t.Errorf("warnings %v, %v", warnings, err)
	}
	if w, err := CheckJWKSFile(mustParseT(t, okRoute)); w != nil || err != nil {
		t.Errorf("without server.jwt: %v %v", w, err)
	}
}

func mustParseT(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(yaml, "{{UP}}", "http://127.0.0.1:9")))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const okRoute = `
routes:
  - id: ok
    match: {path: /ok}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`

// BenchmarkJWTKeyPart is what a jwt:sub part costs a request whose token
// the gateway has seen before: finding the token in Authorization, its
// digest, the cache, the claim.
func BenchmarkJWTKeyPart(b *testing.B) {
	k := jwtKeys["ES256"]
	file := filepath.Join(b.TempDir(), "jwks.json")
	jwks, _ := k.PublicJWKS()
	os.WriteFile(file, jwks, 0o600)
	cfg := mustParseB(b, strings.ReplaceAll(jwtConfig("jwks_file: "+file), "{{UP}}", "http://127.0.0.1:9"))
	gw, err := New(cfg, Options{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	gen := gw.gen.Load()
	spec := gen.routes[0].limits[0]
	tok, err := k.Sign(map[string]any{"iss": testIssuer, "aud": testAudience, "sub": "u-1234567", "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/user", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	values := make([]string, 0, 2)
	b.ReportAllocs()
	for b.Loop() {
		x := exchange{r: req, gen: gen, route: gen.routes[0], path: "/user"}
		if _, _, ok := x.resolve(spec.Key, false, values[:0]); !ok {
			b.Fatal("no key")
		}
	}
}

// BenchmarkServeHTTPJWT is a whole request through the gateway with a
// per-user limit keyed by X-User-Id, and by the sub of a bearer token seen
// before, 1,000 users in turn: the difference is what verified identity
// costs a request.
func BenchmarkServeHTTPJWT(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	k := jwtKeys["ES256"]
	file := filepath.Join(b.TempDir(), "jwks.json")
	jwks, _ := k.PublicJWKS()
	os.WriteFile(file, jwks, 0o600)
	const users = 1000
	var tokens [users]string
	for i := range tokens {
		tokens[i], _ = k.Sign(map[string]any{"iss": testIssuer, "aud": testAudience, "sub": "u" + strconv.Itoa(i), "exp": time.Now().Add(time.Hour).Unix()})
	}
	for _, tc := range []struct{ name, key string }{{"header", `"header:X-User-Id"`}, {"jwt", "jwt:sub"}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := mustParseB(b, `
admin: {listen: ""}
server: {jwt: {jwks_file: `+file+`, issuer: "`+testIssuer+`", audience: `+testAudience+`}}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+up.URL+`"]}
    limits:
      - {name: user, key: [`+tc.key+`, path], fallback: [ip], rate: 1000000/10s}
`)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			do := func(i int) {
				req := httptest.NewRequest("GET", "/api/activities/lucky-meal/receive", nil)
				req.Header.Set("X-User-Id", "u"+strconv.Itoa(i))
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				w := httptest.NewRecorder()
				gw.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			for i := range users {
				do(i) // every token seen once, as a flood's retries are
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 1) % users
				do(i)
			}
		})
	}
}
