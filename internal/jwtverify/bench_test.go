package jwtverify

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// benchClaims are a typical access token's: issuer, audience, subject,
// times and a custom claim.
func benchClaims() map[string]any {
	return map[string]any{
		"iss": "https://login.example.com/", "aud": "lucky-meal", "sub": "u-1234567",
		"iat": t0.Unix(), "nbf": t0.Unix(), "exp": t0.Add(time.Hour).Unix(), "tier": "vip",
	}
}

func benchVerifier(b *testing.B, k *jwtsign.Key) *Verifier {
	return fileVerifier(b, Options{Issuer: "https://login.example.com/", Audience: "lucky-meal", Leeway: 30 * time.Second}, k)
}

// BenchmarkVerifyCached is the cost of a token seen before: what each
// retry of a flood of one client costs.
func BenchmarkVerifyCached(b *testing.B) {
	v := benchVerifier(b, keys.ec)
	tok := sign(b, keys.ec, benchClaims())
	if _, err := v.Verify(tok, t0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyCachedParallel is the same on every core at once.
func BenchmarkVerifyCachedParallel(b *testing.B) {
	v := benchVerifier(b, keys.ec)
	tok := sign(b, keys.ec, benchClaims())
	if _, err := v.Verify(tok, t0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.Verify(tok, t0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkVerifyFirst is the cost of a token not seen before, by
// algorithm: parsing, the signature check, the claims and the cache entry.
// Two tokens take turns in a cache of one entry, so each Verify misses.
func BenchmarkVerifyFirst(b *testing.B) {
	for _, k := range keys.all() {
		b.Run(k.Algorithm(), func(b *testing.B) {
			o := Options{Issuer: "https://login.example.com/", Audience: "lucky-meal", Leeway: 30 * time.Second, CacheEntries: 1}
			v := fileVerifier(b, o, k)
			var toks [2]string
			for i := range toks {
				c := benchClaims()
				c["jti"] = i
				toks[i] = sign(b, k, c)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i ^= 1
				if _, err := v.Verify(toks[i], t0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(toks[0])), "token-bytes")
			if good, _ := v.cache.len(); good != 1 {
				b.Fatalf("%d cached", good)
			}
		})
	}
}

// BenchmarkVerifyTooLarge is the cost of a 1 MB token: refused by its
// length before any of it is read.
func BenchmarkVerifyTooLarge(b *testing.B) {
	v := benchVerifier(b, keys.ec)
	tok := strings.Repeat("a", 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok, t0); ReasonOf(err) != TooLarge {
			b.Fatal(err)
		}
	}
}
