package jwtverify

import (
	"errors"
	"fmt"
)

// Reason is why a token was not accepted. Its text is the reason label of
// the gateway_jwt_failures_total metric.
type Reason string

// The reasons a token fails.
const (
	// TooLarge: the token is longer than Options.MaxTokenBytes; it is
	// refused before any of it is decoded.
	TooLarge Reason = "too_large"
	// Malformed: not a compact JWS of a JSON object of claims, claims
	// that are not UTF-8 or that name a claim twice, or a registered
	// claim (exp, nbf) of the wrong type.
	Malformed Reason = "malformed"
	// Alg: the header's algorithm is not RS256, ES256, EdDSA or HS256
	// ("none" among them), or no key of the set verifies that algorithm.
	Alg Reason = "alg"
	// UnknownKID: no key of the set has the header's kid.
	UnknownKID Reason = "unknown_kid"
	// NoKeys: the verifier has no keys yet (a JWKS URL that has not
	// answered).
	NoKeys Reason = "no_keys"
	// Signature: no key of the set that could have signed the token
	// verifies its signature.
	Signature Reason = "signature"
	// Expired: exp plus the leeway has passed.
	Expired Reason = "expired"
	// NotYetValid: nbf minus the leeway is still to come.
	NotYetValid Reason = "not_yet_valid"
	// Issuer: iss is not the expected issuer.
	Issuer Reason = "issuer"
	// Audience: aud does not hold the expected audience.
	Audience Reason = "audience"
	// Ambiguous: the request carries more than one token (two
	// Authorization headers, two cookies of the name), and which stands
	// for it is each reader's choice: an upstream reading another than
	// the gateway would act for another user than the one counted.
	// Verify never returns it; the caller that finds the tokens reports
	// it with ErrAmbiguous.
	Ambiguous Reason = "ambiguous"
	// ClaimType: a claim that a caller reads is neither a string nor a
	// number (an object, an array, a boolean or null), or is a string
	// that escapes half of a surrogate pair alone ("\ud800"), which is
	// no Unicode text.
	ClaimType Reason = "claim_type"
)

// Reasons lists every Reason, in a fixed order, so that a caller can
// create a metric's series before the first failure.
func Reasons() []Reason {
	return []Reason{TooLarge, Malformed, Alg, UnknownKID, NoKeys, Signature, Expired, NotYetValid, Issuer, Audience, Ambiguous, ClaimType}
}

// ErrAmbiguous is the failure of a request that carries more than one
// token; wrap it to say where they were.
var ErrAmbiguous error = &failure{reason: Ambiguous, detail: "the request carries more than one token, so it has none"}

// ReasonOf is the reason of an error that Verify or Token.Claim returned,
// or "" for nil or any other error.
func ReasonOf(err error) Reason {
	var f *failure
	if errors.As(err, &f) {
		return f.reason
	}
	return ""
}

// failure is a Reason with the detail of one token's failure.
type failure struct {
	reason Reason
	detail string
}

func fail(r Reason, format string, args ...any) error {
	return &failure{reason: r, detail: fmt.Sprintf(format, args...)}
}

func (f *failure) Error() string { return "jwt: " + string(f.reason) + ": " + f.detail }
