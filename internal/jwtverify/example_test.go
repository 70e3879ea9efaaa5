package jwtverify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

func ExampleVerifier_Verify() {
	// An issuer's key, and the JWKS a gateway verifies its tokens with.
	key, _ := jwtsign.ParseKey([]byte(`{"kty": "oct", "kid": "k1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}`))
	jwks, _ := key.PublicJWKS()
	dir, _ := os.MkdirTemp("", "jwks")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "jwks.json")
	os.WriteFile(file, jwks, 0o600)

	v, err := jwtverify.New(jwtverify.Options{File: file, Issuer: "https://login.example.com/", Leeway: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()

	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	token, _ := key.Sign(map[string]any{
		"iss": "https://login.example.com/", "sub": "alice", "tier": "vip", "level": 3.0,
		"exp": now.Add(time.Hour).Unix(),
	})
	tok, err := v.Verify(token, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	sub, _ := tok.Claim("sub")
	level, _ := tok.Claim("level")
	fmt.Println(sub, level)

	_, err = v.Verify(token, now.Add(2*time.Hour))
	fmt.Println(jwtverify.ReasonOf(err))
	_, err = v.Verify("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.", now)
	fmt.Println(jwtverify.ReasonOf(err))
	// Output:
	// alice 3
	// expired
	// alg
}

func ExampleParseKeySet() {
	ks, err := jwtverify.ParseKeySet([]byte(`{"keys": [
		{"kty": "oct", "kid": "k1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"},
		{"kty": "EC", "kid": "k2", "use": "enc", "crv": "P-256",
		 "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}
	]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ks.Len(), "usable")
	for _, s := range ks.Skipped() {
		fmt.Println("skipped", s)
	}
	_, err = jwtverify.ParseKeySet([]byte(`not JSON`))
	fmt.Println(err != nil)
	// Output:
	// 1 usable
	// skipped key 2 (kid "k2", kty "EC"): use "enc", not a signature key
	// true
}
