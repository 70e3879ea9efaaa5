package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// runToken signs a token with a private key, so that a user can try the
// jwt: key parts of a config (and the README's walk-through) without an
// identity provider; with --new-key it makes the key pair to sign with.
func runToken(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("token", "--key FILE [--sub ID] [flags]\n       floodgate token --new-key FILE [--alg ALG] [--kid ID]",
		"Sign a JWT with the private key in FILE (a JWK: RSA, EC P-256, Ed25519 or a shared\n"+
			"secret) and print it, to send as \"Authorization: Bearer TOKEN\" to a gateway whose\n"+
			"server.jwt holds the matching public key. The token has iat, exp (--ttl from now),\n"+
			"and sub, iss, aud and every --claim that is given; its header names the key's kid.\n\n"+
			"  TOKEN=$(floodgate token --key examples/jwt/test-signing-key.json --sub alice \\\n"+
			"      --iss https://login.example.com/ --aud lucky-meal)\n"+
			"  curl -X POST -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:8080/api/activities/lucky-meal/receive\n\n"+
			"With --new-key, make a key pair instead: write the private key to FILE, a new file\n"+
			"of mode 0600, and print the JWKS that verifies its tokens, for server.jwt.jwks_file.\n"+
			"For HS256 that JWKS holds the shared secret itself: keep it as private as FILE.\n\n"+
			"  floodgate token --new-key my-signing-key.json --kid my-key-1 > my-jwks.json")
	keyFile := fs.String("key", "", "the private key `FILE`, a JWK (required to sign)")
	newKey := fs.String("new-key", "", "make a new key and write its private JWK to `FILE`, which must not exist")
	alg := fs.String("alg", "ES256", "the new key's algorithm `ALG`: ES256, RS256, EdDSA or HS256")
	kid := fs.String("kid", "", "the new key's kid `ID` (default: its RFC 7638 thumbprint)")
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
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	set := cli.SetFlags(fs)
	if *newKey != "" {
		for _, name := range []string{"key", "sub", "iss", "aud", "ttl", "claim"} {
			if set[name] {
				return cli.UsageError(fs, stderr, "--new-key makes a key and signs no token: --%s is for signing, with --key", name)
			}
		}
		switch *alg {
		case "ES256", "RS256", "EdDSA", "HS256":
		default:
			return cli.UsageError(fs, stderr, "--alg %q: ES256, RS256, EdDSA or HS256", *alg)
		}
		return makeKey(*newKey, *alg, *kid, stdout, stderr)
	}
	if set["alg"] || set["kid"] {
		return cli.UsageError(fs, stderr, "--alg and --kid apply to --new-key")
	}
	if *keyFile == "" {
		return cli.UsageError(fs, stderr, "--key is required (or --new-key, to make one)")
	}
	if *ttl <= 0 {
		return cli.UsageError(fs, stderr, "--ttl %v: must be positive", *ttl)
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

// makeKey makes a key pair for alg: the private JWK goes to a new file at
// path, readable by its owner only, and the JWKS of its verifying half to
// stdout. An existing file is never written over: it may be the key that
// signs a deployment's tokens.
func makeKey(path, alg, kid string, stdout, stderr io.Writer) int {
	key, priv, jwks, err := newKeyPair(alg, kid)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate token: %v\n", err)
		return exitFailure
	}
	if err := writeNewFile(path, append(priv, '\n')); err != nil {
		if errors.Is(err, os.ErrExist) {
			fmt.Fprintf(stderr, "floodgate token: %s exists; --new-key writes a new file only, never over a key\n", path)
		} else {
			fmt.Fprintf(stderr, "floodgate token: %v\n", err)
		}
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s\n", jwks)
	fmt.Fprintf(stderr, "floodgate token: wrote the private key %s (%s, kid %q); its JWKS is on stdout\n", path, key.Algorithm(), key.KeyID())
	if key.Algorithm() == "HS256" {
		fmt.Fprintf(stderr, "floodgate token: an HS256 JWKS holds the secret itself: keep it as private as %s\n", path)
	}
	return exitOK
}

// newKeyPair makes a key for alg named kid, or by its thumbprint when kid
// is "", and its private JWK and its JWKS.
func newKeyPair(alg, kid string) (*jwtsign.Key, []byte, []byte, error) {
	key, err := jwtsign.Generate(alg, kid)
	if err != nil {
		return nil, nil, nil, err
	}
	if kid == "" {
		if kid, err = key.Thumbprint(); err != nil {
			return nil, nil, nil, err
		}
		if key, err = key.WithKeyID(kid); err != nil {
			return nil, nil, nil, err
		}
	}
	priv, err := key.PrivateJWK()
	if err != nil {
		return nil, nil, nil, err
	}
	jwks, err := key.PublicJWKS()
	if err != nil {
		return nil, nil, nil, err
	}
	return key, priv, jwks, nil
}

// writeNewFile writes data to a file that must not exist yet, of mode
// 0600; a file half written is removed.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
