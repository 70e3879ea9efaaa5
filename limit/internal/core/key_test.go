package core

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

func TestStoredKey(t *testing.T) {
	t.Parallel()
	r := &limit.Rule{Name: "lucky-meal:user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}}
	k := limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "u{1}\n"}, limit.Part{Kind: "path", Value: "/api/a b"}, limit.Part{Kind: "ip", Value: "10.0.0.1", Fallback: true})
	got := StoredKey("fg:", r, k)
	want := "fg:{lucky-meal:user:header%3Ax-user-id=u%7B1%7D%0A:path=/api/a%20b:!ip=10.0.0.1}:fw.10000e"
	if got != want {
		t.Fatalf("StoredKey = %q\nwant        %q", got, want)
	}
	if strings.Count(got, "{") != 1 || strings.Count(got, "}") != 1 {
		t.Fatalf("more than one hash tag in %q", got)
	}
}
