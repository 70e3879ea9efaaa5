package jwtverify

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/syncbuf"
)

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

func TestFileMissingOrBad(t *testing.T) {
	if _, err := New(Options{File: filepath.Join(t.TempDir(), "absent.json")}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("absent file: %v", err)
	}
	if _, err := New(Options{File: writeJWKS(t, []byte("not json"))}); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("not JSON: %v", err)
	}
	if _, err := New(Options{File: writeJWKS(t, bytes.Repeat([]byte(" "), MaxKeySetBytes+1))}); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("too long: %v", err)
	}
}

// The file is watched: a new set verifies its keys' tokens once written, and
// a broken file keeps the keys before it, says so in a log line and in
// Status, until a good file replaces it.
func TestFileReload(t *testing.T) {
	var logs syncBuffer
	path := writeJWKS(t, jwks(t, keys.ec))
	v, err := New(Options{File: path, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ecTok, edTok := sign(t, keys.ec, claims("alice")), sign(t, keys.ed, claims("bob"))
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; log:\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	verifies := func(tok string) bool {
		_, err := v.Verify(tok, t0)
		return err == nil
	}
	if !verifies(ecTok) || verifies(edTok) {
		t.Fatal("the first set")
	}

	// Replaced by a rename, as deployment tools do.
	next := filepath.Join(filepath.Dir(path), "next.json")
	if err := os.WriteFile(next, jwks(t, keys.ed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	eventually("the new key verifies", func() bool { return verifies(edTok) })
	if verifies(ecTok) {
		t.Error("a removed key still verifies")
	}

	if err := os.WriteFile(path, []byte(`{"keys": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually("the broken file is logged", func() bool { return strings.Contains(logs.String(), "does not load") })
	// A token not seen before, so that the cache does not answer for the
	// keys.
	if !verifies(sign(t, keys.ed, claims("carol"))) {
		t.Error("a broken file dropped the keys before it")
	}
	if err := v.Status(); err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "still verify") {
		t.Errorf("Status: %v", err)
	}

	if err := os.WriteFile(path, jwks(t, keys.ec), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually("the good file after the broken one", func() bool { return verifies(ecTok) })
	if err := v.Status(); err != nil {
		t.Errorf("Status after a good file: %v", err)
	}
}
