package limit

import (
	"strings"
	"testing"
)

func TestLongPart(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	a, b := NewKey(Part{Kind: "k", Value: long}), NewKey(Part{Kind: "k", Value: long + "y"})
	if a == b {
		t.Fatal("two long values that differ at the end share a key")
	}
	if len(a) != len("k=")+MaxPartBytes+1+64 {
		t.Fatalf("long key is %d bytes", len(a))
	}
	if NewKey(Part{Kind: "k", Value: long[:MaxPartBytes]}) == NewKey(Part{Kind: "k", Value: long[:MaxPartBytes+1]}) {
		t.Fatal("cut at the limit collides")
	}
}

// FuzzKey checks that the encoding is injective: different lists of parts
// never make the same key, and no key holds a brace or control byte.
func FuzzKey(f *testing.F) {
	f.Add("ip", "10.0.0.1", false, "header:x-user-id", "10.0.0.1", true)
	f.Add("a", "x:b=y", false, "a", "x", false)
	f.Add("a", "}{\n", true, "!a", "%7D", false)
	f.Fuzz(func(t *testing.T, k1, v1 string, f1 bool, k2, v2 string, f2 bool) {
		one := []Part{{Kind: k1, Value: v1, Fallback: f1}}
		two := []Part{{Kind: k1, Value: v1, Fallback: f1}, {Kind: k2, Value: v2, Fallback: f2}}
		other := []Part{{Kind: k2, Value: v2, Fallback: f2}}
		for _, ps := range [][]Part{one, two, other} {
			k := NewKey(ps...)
			if strings.ContainsAny(string(k), "{}\x00\n\r ") {
				t.Fatalf("key %q holds a brace, a space or a control byte", k)
			}
			if len(k) > len(ps)*(3*(MaxPartBytes+len(k1)+len(k2))+70) {
				t.Fatalf("key of %d bytes is unbounded", len(k))
			}
		}
		if NewKey(one...) == NewKey(two...) {
			t.Fatal("one part and two parts share a key")
		}
		same := k1 == k2 && f1 == f2 && (v1 == v2 || len(v1) > MaxPartBytes && len(v2) > MaxPartBytes && v1 == v2)
		if !same && NewKey(one...) == NewKey(other...) {
			t.Fatalf("parts %q=%q and %q=%q share a key", k1, v1, k2, v2)
		}
	})
}
