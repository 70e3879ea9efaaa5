package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/spec"
)

// tokens finds a request's bearer token where server.jwt says and verifies
// it, for the jwt:CLAIM key parts and claim overrides. One is made for each
// generation; its verifier, which holds the keys and the cache of verified
// tokens, is kept across reloads while server.jwt is the same.
type tokens struct {
	cfg      config.JWT
	v        *jwtverify.Verifier
	from     jwtverify.From // where a request carries its token
	failures map[jwtverify.Reason]prometheus.Counter
	log      *slog.Logger
	logs     *logsample.Sampler // failure lines, a few a second
	now      func() time.Time
}

// tokensFor is the token reader of cfg, the running one when server.jwt
// did not change; nil when cfg has no server.jwt.
func (g *Gateway) tokensFor(gen *generation, cfg *config.Config) (*tokens, error) {
	j := cfg.Server.JWT
	if j == nil {
		return nil, nil
	}
	return g.pools.tokens.Hold(gen.lease, fmt.Sprintf("%#v", *j), nil, func(*tokens, bool) (*tokens, error) {
		return g.newTokens(cfg)
	})
}

// newTokens makes the token reader of cfg's server.jwt.
func (g *Gateway) newTokens(cfg *config.Config) (*tokens, error) {
	j := cfg.Server.JWT
	t := &tokens{
		cfg:      *j,
		from:     spec.TokenFrom(j),
		failures: g.metrics.jwtFailures,
		log:      g.log,
		logs:     logsample.New(5),
		now:      g.now,
	}
	if j.JWKSFile != "" {
		// Read once here for the error's sake: a file that does not load
		// is a problem of the config, at its line.
		if _, err := jwtverify.ReadKeySetFile(j.JWKSFile); err != nil {
			return nil, jwksFileError(cfg, err)
		}
	}
	v, err := jwtverify.New(jwtverify.Options{
		File: j.JWKSFile, URL: j.JWKSURL, Issuer: j.Issuer, Audience: j.Audience, Leeway: j.Leeway,
		Logger: g.log,
	})
	if err != nil {
		return nil, fmt.Errorf("server.jwt: %w", err)
	}
	t.v = v
	return t, nil
}

// CheckJWKSFile reads the JWKS file of cfg's server.jwt as the gateway
// will, and returns its problem at the line of jwks_file, as a
// config.Errors, and a warning for each key of it that cannot verify a
// token. It returns nothing for a config without a JWKS file.
func CheckJWKSFile(cfg *config.Config) (warnings config.Errors, err error) {
	j := cfg.Server.JWT
	if j == nil || j.JWKSFile == "" {
		return nil, nil
	}
	ks, err := jwtverify.ReadKeySetFile(j.JWKSFile)
	if err != nil {
		return nil, jwksFileError(cfg, err)
	}
	line := cfg.Line("server.jwt.jwks_file")
	for _, s := range ks.Skipped() {
		warnings = append(warnings, config.Error{File: cfg.File, Line: line,
			Msg: fmt.Sprintf("server.jwt.jwks_file: %q: skipped %s", j.JWKSFile, s)})
	}
	return warnings, nil
}

// jwksFileError reports a JWKS file that does not load at the line of
// jwks_file, as the config's other problems are.
func jwksFileError(cfg *config.Config, err error) error {
	file := cfg.Server.JWT.JWKSFile
	msg := fmt.Sprintf("server.jwt.jwks_file: %q: %v", file, err)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = fmt.Sprintf("server.jwt.jwks_file: %q cannot be read: %v", file, pe.Err)
	}
	return config.Errors{{File: cfg.File, Line: cfg.Line("server.jwt.jwks_file"), Msg: msg}}
}

// verify reads and verifies the token of x's request; nil when it has
// none or it fails, which is counted and logged.
func (t *tokens) verify(x *exchange) *jwtverify.Token {
	raw, err := t.from.Read(x.r)
	if err != nil {
		t.failed(x, err)
		return nil
	}
	if raw == "" {
		return nil
	}
	tok, err := t.v.Verify(raw, t.now())
	if err != nil {
		t.failed(x, err)
		return nil
	}
	return tok
}

// failed counts a token that was not accepted, and logs it, sampled: a
// flood of bad tokens must not flood the log.
func (t *tokens) failed(x *exchange, err error) {
	reason := jwtverify.ReasonOf(err)
	if c := t.failures[reason]; c != nil {
		c.Inc()
	}
	if !t.logs.Allow(t.now().Unix()) {
		return
	}
	t.log.LogAttrs(context.Background(), slog.LevelWarn, "bearer token not accepted; its jwt: key parts are missing",
		slog.String("reason", string(reason)),
		slog.String("error", err.Error()),
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.String("client_ip", x.ipKey()),
	)
}

// status says what is wrong with token verification, "" when nothing is.
func (t *tokens) status() string {
	if t == nil {
		return ""
	}
	if err := t.v.Status(); err != nil {
		return "server.jwt: " + err.Error()
	}
	return ""
}

// token is the request's verified token, read and verified once, when a
// key part or an override first needs it; nil when the request has none
// or it did not verify.
func (x *exchange) token() *jwtverify.Token {
	if !x.tokenRead {
		x.tokenRead = true
		if t := x.gen.jwt; t != nil {
			x.tok = t.verify(x)
		}
	}
	return x.tok
}

// claim is the value of a claim of the request's verified token, as the
// part jwt:name reads it: "" (missing) when there is no verified token, no
// such claim, or a claim that is not a string or a number, which is
// counted once per request.
func (x *exchange) claim(name string) string {
	t := x.token()
	if t == nil {
		return ""
	}
	v, err := t.Claim(name)
	if err != nil {
		if !x.claimFailed {
			x.claimFailed = true
			x.gen.jwt.failed(x, err)
		}
		return ""
	}
	return v
}
