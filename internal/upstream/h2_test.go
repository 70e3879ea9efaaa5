package upstream

import (
	"testing"
	"time"
)

func TestSettingsHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b    []byte
		want bool
	}{
		{[]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, true},
		{[]byte{0, 0, 18, 4, 0, 0, 0, 0, 0}, true},
		{[]byte{0, 0, 0, 4}, false},
		{[]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}, true}, // flags are not looked at
		{[]byte{0, 0, 0, 4, 0, 0x80, 0, 0, 0}, true},
		{[]byte{0, 0, 7, 4, 0, 0, 0, 0, 0}, false},
		{[]byte{0, 0, 8, 7, 0, 0, 0, 0, 0}, false}, // GOAWAY
		{[]byte{0, 0, 0, 4, 0, 0, 0, 0, 1}, false},
		{[]byte("HTTP/1.1 "), false},
		{[]byte("<!DOCTYPE"), false},
		{[]byte("no"), false},
	} {
		if got := settingsHead(tc.b); got != tc.want {
			t.Errorf("settingsHead(%q) = %v, want %v", tc.b, got, tc.want)
		}
	}
}

func TestParseGRPCTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"100m", 100 * time.Millisecond, true},
		{"5S", 5 * time.Second, true},
		{"1H", time.Hour, true},
		{"2M", 2 * time.Minute, true},
		{"7u", 7 * time.Microsecond, true},
		{"0n", 0, true},
		{"99999999H", time.Duration(1<<63 - 1), true},
		{"12345678n", 12345678, true},
		{"123456789n", 0, false}, // nine digits
		{"", 0, false},
		{"S", 0, false},
		{"10", 0, false},
		{"10s", 0, false},
		{"1 S", 0, false},
		{"+1S", 0, false},
	} {
		got, ok := ParseGRPCTimeout(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseGRPCTimeout(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
