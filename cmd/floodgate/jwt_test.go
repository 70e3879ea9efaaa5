package main

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

// floodgateIn runs the binary as floodgate does, in the directory dir.
func floodgateIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var outBuf, errBuf bytes.Buffer
	cmd := exec.Command(floodgateBin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("running floodgate %s: %v", strings.Join(args, " "), err)
	}
	return outBuf.String(), errBuf.String(), code
}

// The example's test key pair, as absolute paths.
func exampleKeys(t *testing.T) (signingKey, jwks string) {
	t.Helper()
	dir, err := filepath.Abs("../../examples/jwt")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "test-signing-key.json"), filepath.Join(dir, "test-jwks.json")
}

const jwtRoute = `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: [jwt:sub], rate: 1/min}
`

// check refuses a JWKS file that serve could not load, at its line, and
// warns of the keys of one that it would skip.
func TestCheckJWKSFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	path := writeConfig(t, "fg.yaml", "server:\n  jwt:\n    jwks_file: "+jwks+"\n    audience: a\n"+jwtRoute)

	_, stderr, code := floodgate(t, "check", "-c", path)
	if want := path + `:3: server.jwt.jwks_file: "` + jwks + `" cannot be read: no such file or directory` + "\n"; code != exitFailure || stderr != want {
		t.Errorf("missing file: exit %d, stderr %q; want 1, %q", code, stderr, want)
	}

	os.WriteFile(jwks, []byte("jwks: [not json]"), 0o644)
	_, stderr, code = floodgate(t, "check", "-c", path)
	if code != exitFailure || !strings.HasPrefix(stderr, path+`:3: server.jwt.jwks_file: "`+jwks+`": not a JWKS: not JSON`) {
		t.Errorf("not JSON: exit %d, stderr %q", code, stderr)
	}

	os.WriteFile(jwks, []byte(`{"keys": [{"kty": "EC", "crv": "P-521", "kid": "big"}]}`), 0o644)
	_, stderr, code = floodgate(t, "check", "-c", path)
	if code != exitFailure || !strings.Contains(stderr, ":3: server.jwt.jwks_file: ") || !strings.Contains(stderr, "no usable key") {
		t.Errorf("no usable key: exit %d, stderr %q", code, stderr)
	}

	_, public := exampleKeys(t)
	data, _ := os.ReadFile(public)
	os.WriteFile(jwks, bytes.Replace(data, []byte(`"keys": [`), []byte(`"keys": [{"kty": "RSA", "kid": "old", "use": "enc", "n": "AQAB", "e": "AQAB"}, `), 1), 0o644)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitOK || !strings.HasPrefix(stdout, path+": ok: ") {
		t.Errorf("a usable set: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, path+`:3: warning: server.jwt.jwks_file: "`+jwks+`": skipped key 1 (kid "old", kty "RSA")`) {
		t.Errorf("no warning of the skipped key: %q", stderr)
	}
}

// floodgate token signs a token that the example's JWKS verifies, with the
// claims asked for.
func TestToken(t *testing.T) {
	t.Parallel()
	signing, public := exampleKeys(t)
	stdout, stderr, code := floodgate(t, "token", "--key", signing, "--sub", "alice", "--iss", "https://login.example.com/",
		"--aud", "lucky-meal", "--ttl", "10m", "--claim", "tier=vip")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	v, err := jwtverify.New(jwtverify.Options{File: public, Issuer: "https://login.example.com/", Audience: "lucky-meal"})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tok, err := v.Verify(strings.TrimSuffix(stdout, "\n"), time.Now())
	if err != nil {
		t.Fatalf("the token does not verify: %v\n%s", err, stdout)
	}
	sub, _ := tok.Claim("sub")
	tier, _ := tok.Claim("tier")
	exp, _ := tok.Expiry()
	if sub != "alice" || tier != "vip" || exp.Before(time.Now().Add(9*time.Minute)) || exp.After(time.Now().Add(11*time.Minute)) {
		t.Errorf("sub %q, tier %q, exp in %v", sub, tier, time.Until(exp))
	}
	if _, err := v.Verify(strings.TrimSpace(stdout), time.Now().Add(11*time.Minute)); jwtverify.ReasonOf(err) != jwtverify.Expired {
		t.Errorf("after --ttl: %v", err)
	}
}

func TestTokenUsage(t *testing.T) {
	t.Parallel()
	signing, public := exampleKeys(t)
	stdout, _, code := floodgate(t, "token", "-h")
	if code != exitOK || !strings.Contains(stdout, "Usage: floodgate token --key FILE") || !strings.Contains(stdout, "-claim NAME=VALUE") {
		t.Errorf("-h: exit %d\n%s", code, stdout)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--sub", "alice"}, exitUsage, "--key is required"},
		{[]string{"--key", signing, "--ttl", "0s"}, exitUsage, "--ttl 0s: must be positive"},
		{[]string{"--key", signing, "--claim", "tier"}, exitUsage, `"tier": want NAME=VALUE`},
		{[]string{"--key", signing, "--claim", "exp=1"}, exitUsage, `"exp=1": exp has a flag of its own`},
		{[]string{"--key", signing, "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"--key", public}, exitFailure, "this is a key set (JWKS), which holds public keys"},
		{[]string{"--key", filepath.Join(t.TempDir(), "none.json")}, exitFailure, "no such file"},
	} {
		_, stderr, code := floodgate(t, append([]string{"token"}, tt.args...)...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("token %v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

// floodgate token --new-key makes a key pair: the private JWK in a new
// file only its owner reads, the JWKS on stdout; the token command signs
// with the one, and the other verifies, naming the key by the kid given or
// by its thumbprint. It never writes over a file.
func TestTokenNewKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct{ alg, kid string }{{"ES256", ""}, {"RS256", "rsa-1"}, {"EdDSA", ""}, {"HS256", "shared-1"}, {"", ""}} {
		name := "key-" + tt.alg + tt.kid + ".json"
		args := []string{"token", "--new-key", name}
		if tt.alg != "" {
			args = append(args, "--alg", tt.alg)
		}
		if tt.kid != "" {
			args = append(args, "--kid", tt.kid)
		}
		jwks, stderr, code := floodgateIn(t, dir, args...)
		if code != exitOK || !strings.Contains(stderr, "wrote the private key "+name) {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
		if hs := strings.Contains(stderr, "holds the secret itself"); hs != (tt.alg == "HS256") {
			t.Errorf("%v: a word of the secret in the JWKS is %v: %q", args, hs, stderr)
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%v: the key file: %v %v, want mode 0600", args, fi, err)
		}
		set, err := jwtverify.ParseKeySet([]byte(jwks))
		if err != nil || set.Len() != 1 || len(set.Skipped()) != 0 {
			t.Fatalf("%v: stdout is not a JWKS of one key: %v\n%s", args, err, jwks)
		}
		var parsed struct {
			Keys []struct{ Kid, Alg string } `json:"keys"`
		}
		json.Unmarshal([]byte(jwks), &parsed)
		kid, alg := parsed.Keys[0].Kid, parsed.Keys[0].Alg
		if want := cmp.Or(tt.alg, "ES256"); alg != want {
			t.Errorf("%v: alg %q, want %q", args, alg, want)
		}
		if tt.kid != "" && kid != tt.kid || tt.kid == "" && len(kid) != 43 {
			t.Errorf("%v: kid %q, want %q or a thumbprint", args, kid, tt.kid)
		}

		jwksFile := filepath.Join(dir, name+".jwks")
		os.WriteFile(jwksFile, []byte(jwks), 0o644)
		tok, stderr, code := floodgateIn(t, dir, "token", "--key", name, "--sub", "alice")
		if code != exitOK {
			t.Fatalf("signing with the new key: exit %d, %s", code, stderr)
		}
		v, err := jwtverify.New(jwtverify.Options{File: jwksFile, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Verify(strings.TrimSpace(tok), time.Now())
		v.Close()
		if err != nil {
			t.Fatalf("%v: the new key's token does not verify with its JWKS: %v", args, err)
		}
		if sub, _ := got.Claim("sub"); sub != "alice" {
			t.Errorf("sub %q", sub)
		}
		header, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
		if !strings.Contains(string(header), `"kid":"`+kid+`"`) {
			t.Errorf("%v: the token's header %s does not name kid %q", args, header, kid)
		}

		before, _ := os.ReadFile(path)
		_, stderr, code = floodgateIn(t, dir, args...)
		after, _ := os.ReadFile(path)
		if code != exitFailure || !strings.Contains(stderr, name+" exists") || !bytes.Equal(before, after) {
			t.Errorf("%v again: exit %d, stderr %q, the file changed %v", args, code, stderr, !bytes.Equal(before, after))
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--new-key", "k.json", "--alg", "PS256"}, `--alg "PS256": ES256, RS256, EdDSA or HS256`},
		{[]string{"--new-key", "k.json", "--sub", "alice"}, "--new-key makes a key and signs no token: --sub is for signing"},
		{[]string{"--new-key", "k.json", "--key", "other.json"}, "--key is for signing"},
		{[]string{"--key", "k.json", "--kid", "a"}, "--alg and --kid apply to --new-key"},
		{[]string{"--alg", "HS256"}, "--alg and --kid apply to --new-key"},
	} {
		_, stderr, code := floodgateIn(t, dir, append([]string{"token"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("token %v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, exitUsage, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "k.json")); err == nil {
		t.Error("a refused command wrote its key")
	}
	if _, stderr, code := floodgateIn(t, dir, "token", "--new-key", filepath.Join(dir, "no-such-dir", "k.json")); code != exitFailure || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("into a missing directory: exit %d, stderr %q", code, stderr)
	}
}

// floodgate load --jwt-key gives each simulated user a token of its own:
// a gateway that limits by the token's sub admits each user once.
func TestLoadJWT(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	signing, public := exampleKeys(t)
	f := newFixture(t, nil)
	f.write(`
server:
  listen: "{{LISTEN}}"
  jwt: {jwks_file: ` + public + `, issuer: "https://login.example.com/", audience: lucky-meal}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - {name: user, key: [jwt:sub], rate: 1/min, align: first}
`)
	f.serve()
	url := "http://" + f.listen + "/sale"
	stdout, stderr, code := floodgate(t, "load", "--url", url, "--rate", "40", "--duration", "1s", "--users", "4",
		"--jwt-key", signing, "--jwt-iss", "https://login.example.com/", "--jwt-aud", "lucky-meal")
	if code != exitOK || !strings.Contains(stdout, "2xx 4   429 36   503 0   other 0") {
		t.Errorf("with tokens: exit %d, want each of 4 users admitted once; stderr %q\n%s", code, stderr, stdout)
	}
	// Without them, the key is missing and on_missing denies: 403.
	stdout, _, _ = floodgate(t, "load", "--url", url, "--rate", "20", "--duration", "1s", "--users", "4")
	if !strings.Contains(stdout, "2xx 0   429 0   503 0   other 20") {
		t.Errorf("without tokens:\n%s", stdout)
	}
	// With a token of another audience, the same.
	stdout, _, _ = floodgate(t, "load", "--url", url, "--rate", "20", "--duration", "1s", "--users", "4",
		"--jwt-key", signing, "--jwt-iss", "https://login.example.com/", "--jwt-aud", "checkout")
	if !strings.Contains(stdout, "2xx 0   429 0   503 0   other 20") {
		t.Errorf("another audience:\n%s", stdout)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--jwt-key", signing}, "--jwt-key signs a token per user: it needs --users"},
		{[]string{"--users", "3", "--jwt-aud", "a"}, "--jwt-iss and --jwt-aud apply to --jwt-key"},
	} {
		_, stderr, code := floodgate(t, append([]string{"load", "--url", url}, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("load %v: exit %d, stderr %q", tt.args, code, stderr)
		}
	}
	if _, stderr, code := floodgate(t, "load", "--url", url, "--users", "3", "--jwt-key", public); code != exitFailure || !strings.Contains(stderr, "key set (JWKS)") {
		t.Errorf("a JWKS as --jwt-key: exit %d, stderr %q", code, stderr)
	}
}

// A JWKS URL that is down when serve starts: it serves, and /readyz stays
// 200 with the reason in its detail, until the keys arrive.
func TestServeJWKSURLDown(t *testing.T) {
	t.Parallel()
	_, public := exampleKeys(t)
	keys, err := os.ReadFile(public)
	if err != nil {
		t.Fatal(err)
	}
	var up atomic.Bool
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write(keys)
	}))
	defer idp.Close()
	f := newFixture(t, nil)
	f.write(`
server:
  listen: "{{LISTEN}}"
  jwt: {jwks_url: "` + idp.URL + `", audience: lucky-meal}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
` + strings.Replace(jwtRoute, "http://127.0.0.1:9000", "{{UPSTREAM}}", 1))
	p := f.serve()
	var detail string
	p.waitFor("/readyz to name the JWKS URL", func() bool {
		r := request(t, "GET", "http://"+f.admin+"/readyz")
		detail, _ = r.json(t)["detail"].(string)
		if r.code != http.StatusOK {
			t.Fatalf("/readyz %d: %s", r.code, r.body)
		}
		return strings.Contains(detail, "503")
	})
	if !strings.Contains(detail, "server.jwt: jwks_url "+idp.URL+": no keys yet") {
		t.Errorf("detail %q", detail)
	}
	if r := p.get("/r"); r.code != http.StatusForbidden {
		t.Errorf("with no keys: %d %s, want 403 key_required", r.code, r.body)
	}
	up.Store(true)
	p.waitFor("/readyz to be clear", func() bool {
		r := request(t, "GET", "http://"+f.admin+"/readyz")
		_, has := r.json(t)["detail"]
		return r.code == http.StatusOK && !has
	})
	p.waitLog(`"msg":"JWKS fetched"`)
}
