package jwtverify

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// A token seen before is the same verified Token, with no second check,
// until its exp; then it is checked again, and fails.
func TestCacheUntilExpiry(t *testing.T) {
	v := fileVerifier(t, Options{Leeway: 30 * time.Second}, keys.ec)
	tok := sign(t, keys.ec, claims("alice"))
	first, err := v.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.Verify(tok, t0.Add(time.Hour+29*time.Second))
	if err != nil || again != first {
		t.Fatalf("second Verify: %p %v, want the cached %p", again, err, first)
	}
	if good, _ := v.cache.len(); good != 1 {
		t.Errorf("%d cached tokens, want 1", good)
	}
	_, err = v.Verify(tok, t0.Add(time.Hour+30*time.Second))
	wantReason(t, err, Expired)
}

// A failure is remembered for a while, so that a flood of one bad token
// costs one signature check every failureTTL, and then checked again.
func TestCacheFailures(t *testing.T) {
	v := fileVerifier(t, Options{}, keys.ec)
	bad := hs256(t, map[string]any{"alg": "HS256", "kid": "raw"}, claims("mallory"), []byte("not the secret, but long enough"))
	_, first := v.Verify(bad, t0)
	wantReason(t, first, Signature)
	if _, again := v.Verify(bad, t0.Add(failureTTL-time.Millisecond)); again != first {
		t.Errorf("within the TTL: %v, want the remembered failure", again)
	}
	if _, later := v.Verify(bad, t0.Add(failureTTL)); later == first || ReasonOf(later) != Signature {
		t.Errorf("after the TTL: %v, want a new check", later)
	}

	// A token not yet valid is remembered only until it may become valid.
	c := claims("bob")
	c["nbf"] = t0.Add(3 * time.Second).Unix()
	early := sign(t, keys.ec, c)
	_, err := v.Verify(early, t0)
	wantReason(t, err, NotYetValid)
	if _, err := v.Verify(early, t0.Add(3*time.Second)); err != nil {
		t.Errorf("at nbf: %v", err)
	}

	// What costs nothing to find again is not remembered.
	if _, err := v.Verify(string(make([]byte, DefaultMaxTokenBytes+1)), t0); ReasonOf(err) != TooLarge {
		t.Fatal(err)
	}
	if _, n := v.cache.len(); n != 1 {
		t.Errorf("%d failures remembered, want 1 (the bad signature)", n)
	}
}

// The cache holds at most its bound, of tokens and of failures.
func TestCacheBounded(t *testing.T) {
	v := fileVerifier(t, Options{CacheEntries: 3}, keys.hmac)
	for i := range 10 {
		if _, err := v.Verify(sign(t, keys.hmac, claims(fmt.Sprint("user", i))), t0); err != nil {
			t.Fatal(err)
		}
		v.Verify(hs256(t, map[string]any{"alg": "HS256", "kid": "hmac-1"}, claims(fmt.Sprint(i)), []byte("wrong secret, long enough")), t0)
	}
	if good, bad := v.cache.len(); good != 3 || bad != 3 {
		t.Errorf("%d tokens and %d failures cached, want 3 and 3", good, bad)
	}
}

// A new key set empties the cache: a token whose key was removed stops
// verifying at once, and a failure is checked again under the new keys.
func TestCacheDroppedWithKeys(t *testing.T) {
	v := fileVerifier(t, Options{}, keys.ec, keys.ed)
	impostor, err := jwtsign.Generate("RS256", "ec-1")
	if err != nil {
		t.Fatal(err)
	}
	ecTok, forged := sign(t, keys.ec, claims("alice")), sign(t, impostor, claims("mallory"))
	if _, err := v.Verify(ecTok, t0); err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(forged, t0)
	wantReason(t, err, Alg)

	// The same set again: the cache stays.
	if err := os.WriteFile(v.o.File, jwks(t, keys.ec, keys.ed), 0o600); err != nil {
		t.Fatal(err)
	}
	v.file.load(t0)
	if good, bad := v.cache.len(); good != 1 || bad != 1 {
		t.Errorf("after reloading the same set: %d tokens, %d failures cached; want both kept", good, bad)
	}

	// The issuer replaced its key ec-1 by an RSA one.
	if err := os.WriteFile(v.o.File, jwks(t, impostor), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.file.load(t0); err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(ecTok, t0)
	wantReason(t, err, Alg)
	if _, err := v.Verify(forged, t0); err != nil {
		t.Errorf("the new key's token: %v", err)
	}
}

// An outcome reached under a key set that was replaced meanwhile is not
// remembered: it may hold only for the old keys.
func TestCacheGeneration(t *testing.T) {
	c := newCache(10, 10)
	var d digest
	_, _, gen := c.get(&d, t0)
	c.reset()
	c.putGood(&d, gen, &Token{}, noExpiry)
	c.putBad(&d, gen, fail(Signature, "x"), noExpiry)
	if good, bad := c.len(); good != 0 || bad != 0 {
		t.Errorf("%d, %d entries of an old generation kept", good, bad)
	}
}
