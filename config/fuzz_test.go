package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse arbitrary bytes: it must never panic or hang, and
// every failure must be an Errors value whose entries have a line and a
// message.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		fullConfig, okRoute, "", "~", "- a", "a: [", "a: &a [*a]", "<<: {}", "server: {listen: 1}",
		"routes: [{id: r, match: {path: /r}, upstream: {targets: [http://x]}, limits: [{name: l, key: [ip], rate: 1/s, overrides: [{values: [[a, b]], rate: 2/s}]}]}]",
		"routes:\n  - &r {id: r, breaker: {<<: *r}}\n",
		"store: {local_share: auto, redis: {password_env: X}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err == nil {
			if c == nil {
				t.Fatal("nil config and nil error")
			}
			_ = c.Summary()
			_ = c.Redacted()
			return
		}
		if c != nil {
			t.Fatal("a config and an error")
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error %v (%T) is not a non-empty Errors", err, err)
		}
		for _, e := range errs {
			if e.Line < 0 || e.Msg == "" || e.File != "fuzz.yaml" {
				t.Fatalf("bad error %+v", e)
			}
		}
	})
}
