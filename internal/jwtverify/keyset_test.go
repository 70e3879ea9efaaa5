package jwtverify

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

func jwkJSON(t *testing.T, k jose.JSONWebKey) string {
	t.Helper()
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseKeySet(t *testing.T) {
	ecPub := strings.TrimSuffix(strings.TrimPrefix(string(jwks(t, keys.ec)), `{"keys":[`), `]}`)
	ecPub = ecPub[strings.Index(ecPub, "},")+2:] // past the raw key
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	private, err := keys.ec.PrivateJWK()
	if err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name, jwks, want string
	}{
		{"not JSON", `keys: [a, b]`, "not JSON"},
		{"truncated", `{"keys": [`, "not JSON"},
		{"a list", `[` + ecPub + `]`, "not an object"},
		{"a string", `"jwks"`, "not an object"},
		{"keys not a list", `{"keys": {}}`, `"keys" is object, not a list`},
		{"no keys", `{"kty": "none"}`, "single key"},
		{"empty object", `{}`, `no "keys" list`},
		{"empty set", `{"keys": []}`, "holds no keys"},
		{"only unsupported keys", `{"keys": [{"kty": "XYZ", "kid": "x"}]}`, `key 1 (kid "x", kty "XYZ"): unsupported key type`},
		{"a private key alone", `{"keys": [` + string(private) + `]}`, "private key material"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			ks, err := ParseKeySet([]byte(tt.jwks))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, %v; want an error with %q", ks, err, tt.want)
			}
		})
	}

	// Keys that cannot verify are skipped, each with its reason; the
	// rest are used.
	skipped := []struct{ key, want string }{
		{`{"kty": "XYZ", "kid": "x"}`, `unsupported key type`},
		{`{"kty": "OKP", "crv": "X25519", "x": "` + b64(make([]byte, 32)) + `"}`, `unsupported key type (curve "X25519")`},
		{jwkJSON(t, jose.JSONWebKey{Key: &p384.PublicKey, KeyID: "p384"}), "only P-256"},
		{jwkJSON(t, jose.JSONWebKey{Key: &rsa1024.PublicKey, KeyID: "small"}), "RSA key of 1024 bits"},
		{`{"kty": "oct", "k": "` + b64([]byte("short")) + `"}`, "HMAC key of 5 bytes"},
		{strings.Replace(ecPub, `"use":"sig"`, `"use":"enc"`, 1), `use "enc"`},
		{strings.Replace(ecPub, `"alg":"ES256"`, `"alg":"ES384"`, 1), `alg "ES384"`},
		{string(private), "private key material"},
		{`{"kty": "EC", "crv": "P-256", "x": "AAAA"}`, `kty "EC"`},
		{`"a string"`, "not a JSON object"},
	}
	var list []string
	for _, s := range skipped {
		list = append(list, s.key)
	}
	data := `{"keys": [` + strings.Join(list, ",") + `,` + ecPub + `]}`
	ks, err := ParseKeySet([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 1 || ks.keys[0].kid != "ec-1" || ks.keys[0].alg != jose.ES256 {
		t.Errorf("keys %+v", ks.keys)
	}
	if len(ks.Skipped()) != len(skipped) {
		t.Fatalf("skipped %q", ks.Skipped())
	}
	for i, s := range skipped {
		if got := ks.Skipped()[i]; !strings.Contains(got, s.want) {
			t.Errorf("skipped[%d] = %q, want it to say %q", i, got, s.want)
		}
	}
}

// A set's digest changes with its keys and with nothing else.
func TestKeySetDigest(t *testing.T) {
	a, _ := ParseKeySet(jwks(t, keys.ec))
	b, _ := ParseKeySet(jwks(t, keys.ec))
	c, _ := ParseKeySet(jwks(t, keys.ec, keys.ed))
	if a.digest != b.digest || a.digest == c.digest {
		t.Errorf("digests: same set %v, another set %v", a.digest == b.digest, a.digest == c.digest)
	}
}
