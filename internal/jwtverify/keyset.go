package jwtverify

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// The algorithms a token may be signed with, one per key type. A key
// verifies only its type's algorithm, so a token's header cannot make an
// RSA public key an HMAC secret.
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA, jose.HS256}

// Smallest keys accepted: RFC 7518 §3.3 (RSA, 2048 bits) and §3.2 (an HMAC
// key at least as long as its hash, 256 bits for HS256).
const (
	minRSABits = 2048
	minHMACLen = 32
)

// MaxKeySetBytes bounds a JWKS, read from a file or fetched.
const MaxKeySetBytes = 1 << 20

// key is one usable key of a set.
type key struct {
	kid string
	alg jose.SignatureAlgorithm
	pub any // *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey or []byte
}

// KeySet is a parsed JWKS: the keys tokens are verified with. It is
// immutable.
type KeySet struct {
	keys    []key
	skipped []string
	digest  [sha256.Size]byte // of the usable keys, to tell a set that did not change
}

// Len is the number of usable keys.
func (s *KeySet) Len() int { return len(s.keys) }

// Skipped says, one line per key, which keys of the JWKS cannot verify a
// token and why (an unsupported type or algorithm, a key too short, a key
// for encryption, a private key). RFC 7517 §5 has a reader ignore the keys
// it does not understand; a set with no usable key at all is an error.
func (s *KeySet) Skipped() []string { return s.skipped }

// ReadKeySetFile reads and parses the JWKS file at path.
func ReadKeySetFile(path string) (*KeySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxKeySetBytes {
		return nil, fmt.Errorf("longer than %d bytes", MaxKeySetBytes)
	}
	return ParseKeySet(data)
}

// ParseKeySet reads a JWKS: a JSON object whose "keys" list holds JWKs. It
// fails on anything that is not such an object and on a set without a
// usable key; keys it cannot use are listed by Skipped.
func ParseKeySet(data []byte) (*KeySet, error) {
	var raw struct {
		Keys *[]json.RawMessage `json:"keys"`
		Kty  string             `json:"kty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return nil, fmt.Errorf("not a JWKS: the JSON is %s, not an object", te.Value)
		}
		if errors.As(err, &te) {
			return nil, fmt.Errorf(`not a JWKS: "keys" is %s, not a list`, te.Value)
		}
		return nil, fmt.Errorf("not a JWKS: not JSON: %v", err)
	}
	if raw.Keys == nil {
		if raw.Kty != "" {
			return nil, errors.New(`not a JWKS: this is a single key (a JWK); a JWKS is {"keys": [KEY, ...]}`)
		}
		return nil, errors.New(`not a JWKS: no "keys" list`)
	}
	s := &KeySet{}
	h := sha256.New()
	for i, r := range *raw.Keys {
		k, name, err := parseKey(r)
		if err != nil {
			if name != "" {
				name = " (" + name + ")"
			}
			s.skipped = append(s.skipped, fmt.Sprintf("key %d%s: %v", i+1, name, err))
			continue
		}
		s.keys = append(s.keys, k)
		fmt.Fprintf(h, "%q %q %d\n", k.kid, k.alg, len(r))
		h.Write(r)
	}
	if len(s.keys) == 0 {
		if len(s.skipped) == 0 {
			return nil, errors.New("the JWKS holds no keys")
		}
		return nil, fmt.Errorf("no usable key: %s", strings.Join(s.skipped, "; "))
	}
	h.Sum(s.digest[:0])
	return s, nil
}

// parseKey reads one JWK and works out the one algorithm it verifies; name
// says which key it is in messages.
func parseKey(r json.RawMessage) (k key, name string, err error) {
	var hdr struct {
		Kty string `json:"kty"`
		Kid string `json:"kid"`
		Crv string `json:"crv"`
	}
	if err := json.Unmarshal(r, &hdr); err != nil {
		return key{}, "", fmt.Errorf("not a JSON object: %v", err)
	}
	name = fmt.Sprintf("kty %q", hdr.Kty)
	if hdr.Kid != "" {
		name = fmt.Sprintf("kid %q, %s", hdr.Kid, name)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(r); err != nil {
		if errors.Is(err, jose.ErrUnsupportedKeyType) {
			if hdr.Crv != "" {
				return key{}, name, fmt.Errorf("unsupported key type (curve %q)", hdr.Crv)
			}
			return key{}, name, errors.New("unsupported key type")
		}
		return key{}, name, errors.New(trimJose(err))
	}
	if jwk.Use != "" && jwk.Use != "sig" {
		return key{}, name, fmt.Errorf("use %q, not a signature key", jwk.Use)
	}
	k = key{kid: jwk.KeyID, pub: jwk.Key}
	switch pub := jwk.Key.(type) {
	case *rsa.PublicKey:
		if pub.N.BitLen() < minRSABits {
			return key{}, name, fmt.Errorf("an RSA key of %d bits; at least %d are needed", pub.N.BitLen(), minRSABits)
		}
		k.alg = jose.RS256
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() {
			return key{}, name, fmt.Errorf("curve %s; only P-256 (ES256) is supported", pub.Curve.Params().Name)
		}
		k.alg = jose.ES256
	case ed25519.PublicKey:
		k.alg = jose.EdDSA
	case []byte:
		if len(pub) < minHMACLen {
			return key{}, name, fmt.Errorf("an HMAC key of %d bytes; HS256 needs at least %d", len(pub), minHMACLen)
		}
		k.alg = jose.HS256
	case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
		// A verifier needs the public half only; a set that holds the
		// private one has leaked the signing key to every reader.
		return key{}, name, errors.New("holds private key material; publish the public key only")
	default:
		return key{}, name, errors.New("unsupported key type")
	}
	if jwk.Algorithm != "" && jwk.Algorithm != string(k.alg) {
		return key{}, name, fmt.Errorf("alg %q; this key type verifies %s only", jwk.Algorithm, k.alg)
	}
	return k, name, nil
}
