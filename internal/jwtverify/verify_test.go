package jwtverify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

func TestVerifyEachAlgorithm(t *testing.T) {
	v := fileVerifier(t, Options{}, keys.all()...)
	for _, k := range keys.all() {
		t.Run(k.Algorithm(), func(t *testing.T) {
			tok, err := v.Verify(sign(t, k, claims("alice-"+k.Algorithm())), t0)
			if err != nil {
				t.Fatal(err)
			}
			if sub, err := tok.Claim("sub"); sub != "alice-"+k.Algorithm() || err != nil {
				t.Errorf("sub %q, %v", sub, err)
			}
			if exp, ok := tok.Expiry(); !ok || !exp.Equal(t0.Add(time.Hour)) {
				t.Errorf("expiry %v %v", exp, ok)
			}
		})
	}
}

// Each bad token is a defined outcome: one reason, never a token.
func TestVerifyFailures(t *testing.T) {
	o := Options{Issuer: "https://login.example.com/", Audience: "lucky-meal", Leeway: 30 * time.Second}
	v := fileVerifier(t, o, keys.rsa, keys.ec, keys.hmac)
	good := func() map[string]any {
		c := claims("alice")
		c["iss"], c["aud"] = o.Issuer, o.Audience
		return c
	}
	with := func(k string, val any) map[string]any {
		c := good()
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	otherEC, err := jwtsign.Generate("ES256", "ec-1") // the same kid, another key
	if err != nil {
		t.Fatal(err)
	}
	unnamed, err := jwtsign.Generate("ES256", "")
	if err != nil {
		t.Fatal(err)
	}
	goodTok := sign(t, keys.ec, good())
	parts := strings.Split(goodTok, ".")
	tampered := parts[0] + "." + b64json(t, with("sub", "mallory")) + "." + parts[2]

	tests := []struct {
		name  string
		token string
		want  Reason
	}{
		{"garbage", "not a token", Malformed},
		{"two parts", parts[0] + "." + parts[1], Malformed},
		{"bad base64", parts[0] + ".!!!." + parts[2], Malformed},
		{"header not JSON", b64([]byte("{")) + "." + parts[1] + "." + parts[2], Malformed},
		{"claims not an object", signRaw(t, []byte(`["alice"]`)), Malformed},
		{"claims not JSON", signRaw(t, []byte(`sub=alice`)), Malformed},
		{"a second object after the claims", signRaw(t, []byte(`{"sub": "alice"} {}`)), Malformed},
		{"exp a string", sign(t, keys.ec, with("exp", "tomorrow")), Malformed},
		{"alg none", b64json(t, map[string]any{"alg": "none", "typ": "JWT"}) + "." + b64json(t, good()) + ".", Alg},
		{"alg none, kid of a key", b64json(t, map[string]any{"alg": "none", "kid": "ec-1"}) + "." + b64json(t, good()) + ".", Alg},
		{"alg HS512", hs256(t, map[string]any{"alg": "HS512", "kid": "hmac-1"}, good(), []byte("secret")), Alg},
		// The classic confusion: the RSA key's kid, alg switched to HS256,
		// and the RSA public key, which anyone may read, as the HMAC
		// secret. The RSA key verifies RS256 only.
		{"HS256 with the RSA public key", hs256(t, map[string]any{"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, good(), rsaPublicPEM(t)), Alg},
		{"EdDSA with no Ed25519 key in the set", sign(t, keys.ed, good()), UnknownKID},
		{"unknown kid", hs256(t, map[string]any{"alg": "HS256", "kid": "nobody"}, good(), []byte("secret")), UnknownKID},
		{"another key under a known kid", sign(t, otherEC, good()), Signature},
		{"tampered claims", tampered, Signature},
		{"no kid, no key verifies", sign(t, unnamed, good()), Signature},
		{"expired", sign(t, keys.ec, with("exp", t0.Add(-31*time.Second).Unix())), Expired},
		{"not yet valid", sign(t, keys.ec, with("nbf", t0.Add(31*time.Second).Unix())), NotYetValid},
		{"no iss", sign(t, keys.ec, with("iss", nil)), Issuer},
		{"another iss", sign(t, keys.ec, with("iss", "https://evil.example.com/")), Issuer},
		{"iss a number", sign(t, keys.ec, with("iss", 7)), Issuer},
		{"no aud", sign(t, keys.ec, with("aud", nil)), Audience},
		{"another aud", sign(t, keys.ec, with("aud", "checkout")), Audience},
		{"aud list without it", sign(t, keys.ec, with("aud", []string{"checkout", "cart"})), Audience},
		{"aud an object", sign(t, keys.ec, with("aud", map[string]any{"lucky-meal": true})), Audience},
		{"1 MB", strings.Repeat("a", 1<<20), TooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := v.Verify(tt.token, t0)
			if tok != nil {
				t.Errorf("got a token")
			}
			wantReason(t, err, tt.want)
		})
	}
	t.Run("good", func(t *testing.T) {
		if _, err := v.Verify(goodTok, t0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("leeway", func(t *testing.T) {
		for _, c := range []map[string]any{
			with("exp", t0.Add(-29*time.Second).Unix()),
			with("nbf", t0.Add(29*time.Second).Unix()),
			with("aud", []string{"checkout", "lucky-meal"}),
		} {
			if _, err := v.Verify(sign(t, keys.ec, c), t0); err != nil {
				t.Errorf("%v: %v", c, err)
			}
		}
	})
}

// Claims that encoding/json reads one way and another reader may read
// another are malformed: bytes that are not UTF-8, which it decodes as
// U+FFFD, so that "\xff\xfe" and "\xfe\xff" would be one user; and a
// claim named twice, of which it keeps the last, where an upstream may
// keep the first.
func TestClaimsReadOneWay(t *testing.T) {
	v := fileVerifier(t, Options{})
	for name, payload := range map[string]string{
		"a claim not UTF-8":                 "{\"sub\": \"\xff\xfe\"}",
		"a claim not UTF-8, the other way":  "{\"sub\": \"\xfe\xff\"}",
		"a claim name not UTF-8":            "{\"s\xffb\": \"alice\"}",
		"a claim named twice":               `{"sub": "alice", "sub": "bob"}`,
		"a claim named twice, once escaped": `{"sub": "alice", "s\u0075b": "bob"}`,
		"a claim named twice, apart":        `{"sub": "alice", "tier": "vip", "sub": "alice"}`,
	} {
		tok, err := v.Verify(signRaw(t, []byte(payload)), t0)
		if tok != nil {
			sub, _ := tok.Claim("sub")
			t.Errorf("%s: verified, sub %q", name, sub)
			continue
		}
		wantReason(t, err, Malformed)
	}
	// A claim that is an object may name its members as it likes: no key
	// part reads inside it.
	if _, err := v.Verify(signRaw(t, []byte(`{"sub": "alice", "x": {"a": 1, "a": 2}}`)), t0); err != nil {
		t.Errorf("a member named twice inside a claim: %v", err)
	}
}

// The part a claim makes is a string as it is, a number in canonical
// decimal; any other claim is a ClaimType failure, and an absent one is
// just absent.
func TestClaims(t *testing.T) {
	v := fileVerifier(t, Options{}, keys.ed)
	c := claims("alice")
	c["tier"] = "vip"
	c["n"] = 42.0
	c["big"] = 12345678901234567890.0
	c["obj"] = map[string]any{"a": 1}
	c["arr"] = []any{"a"}
	c["yes"] = true
	c["nothing"] = nil
	c["empty"] = ""
	tok, err := v.Verify(sign(t, keys.ed, c), t0)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"sub": "alice", "tier": "vip", "n": "42", "big": "12345678901234567000", "empty": "", "absent": ""} {
		if got, err := tok.Claim(name); got != want || err != nil {
			t.Errorf("claim %s: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"obj", "arr", "yes", "nothing"} {
		got, err := tok.Claim(name)
		if got != "" || ReasonOf(err) != ClaimType {
			t.Errorf("claim %s: %q, %v; want a claim_type failure", name, got, err)
		}
	}
	// Numbers as written by hand, exponent and all.
	raw := signRaw(t, []byte(`{"a": 4.2e1, "b": 420E-1, "c": -0.0, "d": 1.50, "e": 1e21, "f": 1e999999}`))
	if tok, err = v.Verify(raw, t0); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "42", "b": "42", "c": "0", "d": "1.5", "e": "1000000000000000000000"} {
		if got, err := tok.Claim(name); got != want || err != nil {
			t.Errorf("claim %s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := tok.Claim("f"); ReasonOf(err) != ClaimType {
		t.Errorf("1e999999: %v, want claim_type", err)
	}

	// Escapes: a surrogate pair is its character, an escaped backslash
	// is a backslash; a lone half of a pair is no character, and decoded
	// every one would be U+FFFD, one key for them all.
	raw = signRaw(t, []byte(`{"pair": "\ud83d\ude00", "text": "a\\ud800", "fffd": "\ufffd", "tab": "a\tb",`+
		`"high": "\ud800", "other": "\udbff", "low": "\udc00", "reversed": "\udc00\ud800", "two highs": "x\ud800\ud800\udc00",`+
		`"high at the end": "x\uD800"}`))
	if tok, err = v.Verify(raw, t0); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"pair": "\U0001F600", "text": `a\ud800`, "fffd": "\uFFFD", "tab": "a\tb"} {
		if got, err := tok.Claim(name); got != want || err != nil {
			t.Errorf("claim %s: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"high", "other", "low", "reversed", "two highs", "high at the end"} {
		if got, err := tok.Claim(name); got != "" || ReasonOf(err) != ClaimType {
			t.Errorf("claim %s: %q, %v; want a claim_type failure", name, got, err)
		}
	}
}

func TestCanonicalNumber(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "0.0": "0", "0e5": "0", "42": "42", "42.0": "42", "4.2e1": "42", "4.2E+1": "42",
		"420e-1": "42", "-17": "-17", "0.5": "0.5", "5e-1": "0.5", "0.000123": "0.000123", "1.23e-4": "0.000123",
		"100": "100", "1e2": "100", "1.5e3": "1500", "12345678901234567890": "12345678901234567890",
		"-1.25e-2": "-0.0125", "007": "", "1.": "", ".5": "", "1e": "", "--1": "", "+1": "", "1e9999999": "", "": "",
		"1x": "", "NaN": "",
	} {
		got, ok := canonicalNumber(in)
		if want == "" {
			if ok {
				t.Errorf("%q: %q, want refused", in, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
}

func FuzzCanonicalNumber(f *testing.F) {
	for _, s := range []string{"0", "-4.2e1", "1e-300", "12345678901234567890.5", "1e256"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := canonicalNumber(s)
		if !ok {
			return
		}
		if len(got) > maxNumberText {
			t.Fatalf("%q: %d bytes", s, len(got))
		}
		// The canonical form is its own canonical form.
		if again, ok := canonicalNumber(got); !ok || again != got {
			t.Fatalf("%q -> %q -> %q %v", s, got, again, ok)
		}
	})
}

// Verify never panics and never accepts what it was not given a key for.
func FuzzVerify(f *testing.F) {
	v := fileVerifier(f, Options{}, keys.hmac)
	f.Add(sign(f, keys.hmac, claims("alice")))
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		tok, err := v.Verify(token, t0)
		if (tok == nil) == (err == nil) {
			t.Fatalf("token %v and error %v", tok, err)
		}
		if err != nil && ReasonOf(err) == "" {
			t.Fatalf("an error without a reason: %v", err)
		}
	})
}

// readClaim never panics on a JSON string, and the text it accepts is
// what encoding/json decodes.
func FuzzReadClaim(f *testing.F) {
	for _, s := range []string{"alice", `\ud83d\ude00`, `\ud800`, `a\\ud800`, `\udc00\ud800`, `x\uD800\u0041`, `\"`, "\u00e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		val := []byte(`"` + s + `"`)
		var want string
		if !utf8.Valid(val) || json.Unmarshal(val, &want) != nil {
			return
		}
		c := readClaim("c", val)
		if c.err == nil && c.text != want {
			t.Fatalf("%s: %q, encoding/json reads %q", val, c.text, want)
		}
		if c.err != nil && !strings.Contains(want, "\uFFFD") {
			t.Fatalf("%s refused (%v), yet it decodes to %q", val, c.err, want)
		}
	})
}
