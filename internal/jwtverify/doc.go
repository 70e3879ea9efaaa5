// Package jwtverify verifies the bearer tokens (JWT, RFC 7519) that
// floodgate's jwt:CLAIM key parts and claim overrides read, against the keys
// of a JWKS (RFC 7517) from a file or a URL.
//
// A token is trusted only as far as its signature and its registered claims
// allow: it must be a compact JWS signed with RS256, ES256, EdDSA or HS256
// by a key of the set whose type (and "alg", when the key names one) is that
// algorithm's, so a token cannot choose how it is checked (alg "none", or
// HS256 with an RSA public key as the secret, fail with Alg). Its exp and
// nbf hold with a leeway, and its iss and aud match when the Verifier is
// told what to expect. Every failure carries one Reason of a small fixed set,
// which is what the gateway counts failures by.
//
// Time is an argument: Verify(token, now) decides by now alone, and only the
// background refresh of a JWKS URL and the watch of a JWKS file read the
// clock.
//
// A gateway meets the same token again and again (a client that retries a
// rejected request sends it every time), so verified tokens are cached by
// the SHA-256 digest of their text until their exp, and failures for a few
// seconds, both bounded in entries; a change of the key set empties both,
// so a key removed from the set stops verifying at once.
package jwtverify
