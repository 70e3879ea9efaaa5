package jwtsign_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

// A key's tokens verify against its PublicJWKS, and its PrivateJWK reads
// back as the same key.
func TestSignVerify(t *testing.T) {
	now := time.Now()
	for _, alg := range []string{"RS256", "ES256", "EdDSA", "HS256"} {
		t.Run(alg, func(t *testing.T) {
			k, err := jwtsign.Generate(alg, "k-"+alg)
			if err != nil {
				t.Fatal(err)
			}
			priv, err := k.PrivateJWK()
			if err != nil {
				t.Fatal(err)
			}
			again, err := jwtsign.ParseKey(priv)
			if err != nil || again.Algorithm() != alg || again.KeyID() != "k-"+alg {
				t.Fatalf("read back: %v %v", again, err)
			}
			jwks, err := k.PublicJWKS()
			if err != nil {
				t.Fatal(err)
			}
			ks, err := jwtverify.ParseKeySet(jwks)
			if err != nil || ks.Len() != 1 {
				t.Fatalf("the public JWKS: %v %v", ks, err)
			}
			file := filepath.Join(t.TempDir(), "jwks.json")
			os.WriteFile(file, jwks, 0o600)
			v, err := jwtverify.New(jwtverify.Options{File: file, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			tok, err := again.Sign(map[string]any{"sub": "alice", "exp": now.Add(time.Minute).Unix()})
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(tok, now)
			if err != nil {
				t.Fatal(err)
			}
			if sub, _ := got.Claim("sub"); sub != "alice" {
				t.Errorf("sub %q", sub)
			}
			if kid := headerKID(t, tok); kid != "k-"+alg {
				t.Errorf("the header's kid is %q, want %q", kid, "k-"+alg)
			}
		})
	}
}

// headerKID is the kid of a compact JWS's header, "" when it has none.
func headerKID(t *testing.T, tok string) string {
	t.Helper()
	h, _, _ := strings.Cut(tok, ".")
	data, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	var header struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(data, &header); err != nil {
		t.Fatal(err)
	}
	return header.Kid
}

// The tokens of each of several HMAC keys verify against a set of them
// all: each names its key, so the verifier need not try more than one.
// Without the kid, a set with more than a few keys of one algorithm
// refuses them (unknown_kid).
func TestSignManyHMACKeys(t *testing.T) {
	var ks []*jwtsign.Key
	for i := range 6 {
		k, err := jwtsign.Generate("HS256", fmt.Sprintf("hmac-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	jwks, err := jwtsign.PublicJWKS(ks...)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := jwtverify.New(jwtverify.Options{File: file, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	now := time.Now()
	for _, k := range ks {
		tok, err := k.Sign(map[string]any{"sub": k.KeyID(), "exp": now.Add(time.Minute).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok, now); err != nil {
			t.Errorf("%s: %v", k.KeyID(), err)
		}
	}
}

func TestParseKeyRefuses(t *testing.T) {
	ec, _ := jwtsign.Generate("ES256", "ec")
	jwks, _ := ec.PublicJWKS()
	pub := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(string(jwks)), `{`), `}`)
	pub = strings.TrimSpace(pub)
	pub = pub[strings.Index(pub, "{") : strings.LastIndex(pub, "}")+1]
	for _, tt := range []struct{ name, key, want string }{
		{"a JWKS", string(jwks), "key set"},
		{"a public key", pub, "public key cannot sign"},
		{"not JSON", "-----BEGIN PRIVATE KEY-----", "not a JWK"},
		{"short secret", `{"kty": "oct", "k": "c2hvcnQ"}`, "at least 32"},
		{"alg of another type", `{"kty": "oct", "alg": "RS256", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}`, `alg "RS256"`},
	} {
		if _, err := jwtsign.ParseKey([]byte(tt.key)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	if _, err := jwtsign.Generate("PS256", ""); err == nil {
		t.Error("Generate PS256")
	}
}

// A key's thumbprint is RFC 7638's: of its public parameters only, so
// the same under another kid, and another for another key; an HMAC key's
// is of {"k", "kty"}.
func TestThumbprint(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256", "EdDSA", "HS256"} {
		k, err := jwtsign.Generate(alg, "")
		if err != nil {
			t.Fatal(err)
		}
		tp, err := k.Thumbprint()
		if err != nil || len(tp) != 43 {
			t.Fatalf("%s: thumbprint %q, %v", alg, tp, err)
		}
		named, err := k.WithKeyID(tp)
		if err != nil || named.KeyID() != tp {
			t.Fatalf("%s: WithKeyID: %v %v", alg, named, err)
		}
		if again, _ := named.Thumbprint(); again != tp {
			t.Errorf("%s: %q under a kid, %q without", alg, again, tp)
		}
		other, _ := jwtsign.Generate(alg, "")
		if otp, _ := other.Thumbprint(); otp == tp {
			t.Errorf("%s: two keys, one thumbprint", alg)
		}
		if tok, err := named.Sign(map[string]any{"sub": "a"}); err != nil || headerKID(t, tok) != tp {
			t.Errorf("%s: a token of the renamed key: %v", alg, err)
		}
	}
	// Computed apart: base64url(SHA-256({"k":"<base64url of the secret>","kty":"oct"})).
	k, err := jwtsign.ParseKey([]byte(`{"kty": "oct", "kid": "x", "k": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}`))
	if err != nil {
		t.Fatal(err)
	}
	if tp, _ := k.Thumbprint(); tp != "XOBEfwKZzZgziWfq7yZzhEKNQfihBMioCzRbNmqUH0Y" {
		t.Errorf("the HMAC key's thumbprint %q", tp)
	}
}
