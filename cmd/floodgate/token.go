package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// runToken signs a token with a private key, so that a user can try the
// jwt: key parts of a config (and the README's walk-through) without an
// identity provider.
func runToken(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("token", "--key FILE [--sub ID] [flags]",
		"Sign a JWT with the private key in FILE (a JWK: RSA, EC P-256, Ed25519 or a shared\n"+
			"secret) and print it, to send as \"Authorization: Bearer TOKEN\" to a gateway whose\n"+
			"server.jwt holds the matching public key. The token has iat, exp (--ttl from now),\n"+
			"and sub, iss, aud and every --claim that is given; its header names the key's kid.\n\n"+
			"  TOKEN=$(floodgate token --key examples/jwt/test-signing-key.json --sub alice \\\n"+
			"      --iss https://login.example.com/ --aud lucky-meal)\n"+
			"  curl -X POST -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:8080/api/activities/lucky-meal/receive")
	keyFile := fs.String("key", "", "the private key `FILE`, a JWK (required)")
	sub := fs.String("sub", "", "the subject `ID`: who the token is for")
	iss := fs.String("iss", "", "the issuer `URL`, as server.jwt.issuer expects it")
	aud := fs.String("aud", "", "the `AUDIENCE`, as server.jwt.audience expects it")
	ttl := fs.Duration("ttl", time.Hour, "how long `D` the token is valid")
	extra := map[string]any{}
	fs.Func("claim", "add the string claim `NAME=VALUE` (repeatable)", func(v string) error {
		name, val, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q: want NAME=VALUE", v)
		}
		switch name {
		case "iat", "exp", "sub", "iss", "aud":
			return fmt.Errorf("%q: %s has a flag of its own, or is set from --ttl", v, name)
		}
		extra[name] = val
		return nil
	})
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *keyFile == "" {
		return usageError(fs, stderr, "--key is required")
	}
	if *ttl <= 0 {
		return usageError(fs, stderr, "--ttl %v: must be positive", *ttl)
	}
	key, err := jwtsign.ReadKeyFile(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate token: %s: %v\n", *keyFile, err)
		return exitFailure
	}
	now := time.Now()
	claims := map[string]any{"iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
	for name, v := range map[string]string{"sub": *sub, "iss": *iss, "aud": *aud} {
		if v != "" {
			claims[name] = v
		}
	}
	for name, v := range extra {
		claims[name] = v
	}
	tok, err := key.Sign(claims)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate token: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, tok)
	return exitOK
}
