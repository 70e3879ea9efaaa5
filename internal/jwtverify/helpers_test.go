package jwtverify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// t0 is the tests' clock: every Verify takes its time as an argument.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// keys are one key of each supported type, made once per test binary.
type testKeys struct {
	rsa, ec, ed, hmac *jwtsign.Key
}

var keys = func() testKeys {
	gen := func(alg, kid string) *jwtsign.Key {
		k, err := jwtsign.Generate(alg, kid)
		if err != nil {
			panic(err)
		}
		return k
	}
	return testKeys{
		rsa:  gen("RS256", "rsa-1"),
		ec:   gen("ES256", "ec-1"),
		ed:   gen("EdDSA", "ed-1"),
		hmac: gen("HS256", "hmac-1"),
	}
}()

func (k testKeys) all() []*jwtsign.Key { return []*jwtsign.Key{k.rsa, k.ec, k.ed, k.hmac} }

// rawSecret is the HMAC key, kid "raw", that signRaw signs payloads of any
// shape with; every set jwks makes holds it.
var rawSecret = []byte("0123456789abcdef0123456789abcdef")

// jwks is the JSON of a set holding ks' verifying keys and the raw key.
func jwks(t testing.TB, ks ...*jwtsign.Key) []byte {
	t.Helper()
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	b, err := jwtsign.PublicJWKS(ks...)
	if err == nil {
		err = json.Unmarshal(b, &set)
	}
	if err != nil {
		t.Fatal(err)
	}
	set.Keys = append([]json.RawMessage{json.RawMessage(`{"kty":"oct","kid":"raw","alg":"HS256","k":"` + b64(rawSecret) + `"}`)}, set.Keys...)
	b, err = json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeJWKS writes a JWKS file and returns its path.
func writeJWKS(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileVerifier is a Verifier of the keys ks, from a file, without a watch.
func fileVerifier(t testing.TB, o Options, ks ...*jwtsign.Key) *Verifier {
	t.Helper()
	o.File = writeJWKS(t, jwks(t, ks...))
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	v, err := newVerifier(o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claims are a token's claims valid at t0 for an hour, for sub.
func claims(sub string) map[string]any {
	return map[string]any{"sub": sub, "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}
}

func sign(t testing.TB, k *jwtsign.Key, c map[string]any) string {
	t.Helper()
	tok, err := k.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func b64json(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b64(b)
}

// hs256 makes a token by hand: header and claims, HMAC-SHA256 under secret.
func hs256(t testing.TB, header map[string]any, c map[string]any, secret []byte) string {
	t.Helper()
	return mac(b64json(t, header)+"."+b64json(t, c), secret)
}

func mac(input string, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(input))
	return input + "." + b64(m.Sum(nil))
}

// signRaw signs a payload of any shape with the raw key, as a careless
// issuer might.
func signRaw(t testing.TB, payload []byte) string {
	t.Helper()
	return mac(b64json(t, map[string]any{"alg": "HS256", "kid": "raw"})+"."+b64(payload), rawSecret)
}

// rsaPublicPEM is the RSA key's public half as PEM, the bytes an HMAC
// confusion attack uses as the secret.
func rsaPublicPEM(t testing.TB) []byte {
	t.Helper()
	ks, err := ParseKeySet(jwks(t, keys.rsa))
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(ks.keys[1].pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func wantReason(t testing.TB, err error, want Reason) {
	t.Helper()
	if got := ReasonOf(err); got != want {
		t.Fatalf("reason %q (%v), want %q", got, err, want)
	}
}
