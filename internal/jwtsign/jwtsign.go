// Package jwtsign signs the tokens floodgate's own tools make: the token
// command, the load generator's tokens for its simulated users, and the
// demo's. It is the other side of internal/jwtverify, for rehearsals and
// tests; a real deployment's tokens come from its identity provider.
package jwtsign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Key is a private key that signs tokens with the one algorithm its type
// has: RS256 for RSA, ES256 for EC P-256, EdDSA for Ed25519, HS256 for a
// shared secret (oct).
type Key struct {
	jwk    jose.JSONWebKey
	alg    jose.SignatureAlgorithm
	signer jose.Signer
}

// ReadKeyFile reads a private JWK from a file.
func ReadKeyFile(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, err
	}
	return ParseKey(data)
}

// ParseKey reads a private JWK (RFC 7517): one key, with its private
// parameters.
func ParseKey(data []byte) (*Key, error) {
	var probe struct {
		Keys json.RawMessage `json:"keys"`
	}
	if json.Unmarshal(data, &probe) == nil && probe.Keys != nil {
		return nil, errors.New(`this is a key set (JWKS), which holds public keys; give the private key, one JWK`)
	}
	var jwk jose.JSONWebKey
	if err := json.Unmarshal(data, &jwk); err != nil {
		return nil, fmt.Errorf("not a JWK: %s", strings.TrimPrefix(err.Error(), "go-jose/go-jose: "))
	}
	return newKey(jwk)
}

// Generate makes a new key for alg (RS256, ES256, EdDSA or HS256), named
// kid.
func Generate(alg, kid string) (*Key, error) {
	var priv any
	var err error
	switch jose.SignatureAlgorithm(alg) {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case jose.HS256:
		secret := make([]byte, 32)
		_, err = rand.Read(secret)
		priv = secret
	default:
		return nil, fmt.Errorf("algorithm %q: RS256, ES256, EdDSA or HS256", alg)
	}
	if err != nil {
		return nil, err
	}
	return newKey(jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: alg, Use: "sig"})
}

func newKey(jwk jose.JSONWebKey) (*Key, error) {
	var alg jose.SignatureAlgorithm
	switch k := jwk.Key.(type) {
	case *rsa.PrivateKey:
		alg = jose.RS256
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("curve %s: only P-256 (ES256) is supported", k.Curve.Params().Name)
		}
		alg = jose.ES256
	case ed25519.PrivateKey:
		alg = jose.EdDSA
	case []byte:
		if len(k) < 32 {
			return nil, fmt.Errorf("an HMAC key of %d bytes; HS256 needs at least 32", len(k))
		}
		alg = jose.HS256
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return nil, errors.New("a public key cannot sign; give the private key")
	default:
		return nil, errors.New("unsupported key type")
	}
	if jwk.Algorithm != "" && jwk.Algorithm != string(alg) {
		return nil, fmt.Errorf("alg %q: this key type signs %s only", jwk.Algorithm, alg)
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if jwk.KeyID != "" {
		// go-jose writes the kid of an asymmetric key only: a symmetric
		// key has no public half to name. A verifier holding more than a
		// few HMAC keys needs it all the same, to know which to try.
		opts = opts.WithHeader("kid", jwk.KeyID)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jwk}, opts)
	if err != nil {
		return nil, err
	}
	return &Key{jwk: jwk, alg: alg, signer: signer}, nil
}

// Thumbprint is the key's RFC 7638 thumbprint: the SHA-256 of its
// required public parameters (of the secret, for an HMAC key),
// base64url. It names the key and no other, which makes it a kid that
// needs no registry.
func (k *Key) Thumbprint() (string, error) {
	var sum []byte
	if secret, ok := k.jwk.Key.([]byte); ok {
		// go-jose has no thumbprint of an oct key; RFC 7638 §3.2 says
		// its members are k and kty, in that order.
		h := sha256.Sum256([]byte(`{"k":"` + base64.RawURLEncoding.EncodeToString(secret) + `","kty":"oct"}`))
		sum = h[:]
	} else {
		var err error
		if sum, err = k.jwk.Thumbprint(crypto.SHA256); err != nil {
			return "", err
		}
	}
	return base64.RawURLEncoding.EncodeToString(sum), nil
}

// WithKeyID is the same key named kid.
func (k *Key) WithKeyID(kid string) (*Key, error) {
	jwk := k.jwk
	jwk.KeyID = kid
	return newKey(jwk)
}

// Algorithm is the algorithm the key signs with.
func (k *Key) Algorithm() string { return string(k.alg) }

// KeyID is the key's kid, which its tokens name; "" when it has none.
func (k *Key) KeyID() string { return k.jwk.KeyID }

// Sign makes a compact JWS of claims, with the key's kid in its header.
func (k *Key) Sign(claims map[string]any) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := k.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// PrivateJWK is the key as a JWK, private parameters included.
func (k *Key) PrivateJWK() ([]byte, error) { return json.MarshalIndent(k.jwk, "", "  ") }

// PublicJWKS is the JWKS that verifies the key's tokens: its public half,
// or for an HMAC key the secret itself, which the verifier must hold too.
func (k *Key) PublicJWKS() ([]byte, error) { return PublicJWKS(k) }

// PublicJWKS is the JWKS that verifies the tokens of all of keys.
func PublicJWKS(keys ...*Key) ([]byte, error) {
	var set jose.JSONWebKeySet
	for _, k := range keys {
		pub := k.jwk
		if _, secret := k.jwk.Key.([]byte); !secret {
			pub = k.jwk.Public()
		}
		set.Keys = append(set.Keys, pub)
	}
	return json.MarshalIndent(set, "", "  ")
}

// UserTokens signs a token for each simulated user, sub the user's id,
// valid until exp (past the end of a run); iss and aud are left out when
// empty.
func (k *Key) UserTokens(iss, aud string, exp time.Time) func(user string) string {
	return func(user string) string {
		claims := map[string]any{"sub": user, "iat": time.Now().Unix(), "exp": exp.Unix()}
		if iss != "" {
			claims["iss"] = iss
		}
		if aud != "" {
			claims["aud"] = aud
		}
		// A key that was read signs; a failure here would be a broken
		// key, and a request without a token shows it at the gateway.
		tok, _ := k.Sign(claims)
		return tok
	}
}
