package pathclean

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

var cleanTests = []struct {
	in, want string
	bad      bool // Clean must fail with ErrBadPath
}{
	// Already clean: returned as is.
	{in: "/", want: "/"},
	{in: "/a", want: "/a"},
	{in: "/api/v1/users/42", want: "/api/v1/users/42"},
	{in: "/caf%C3%A9", want: "/caf%C3%A9"},
	{in: "/a;b=c/d:e@f!$&'()*+,=", want: "/a;b=c/d:e@f!$&'()*+,="},
	{in: "/a/...", want: "/a/..."},
	{in: "/a/.b/..c/c..", want: "/a/.b/..c/c.."},
	{in: "/%20%3F%23%25", want: "/%20%3F%23%25"},
	{in: "/a%0Ab", want: "/a%0Ab"}, // an escaped control byte other than NUL is a valid path
	{in: "/[v6]", want: "/[v6]"},
	{in: "/API", want: "/API"}, // case-sensitive

	// Empty segments, dot segments and a trailing slash.
	{in: "", want: "/"},
	{in: "//", want: "/"},
	{in: "/a/", want: "/a"},
	{in: "//a//b//", want: "/a/b"},
	{in: "/a//b/./c/../d/", want: "/a/b/d"},
	{in: "/.", want: "/"},
	{in: "/./", want: "/"},
	{in: "/a/..", want: "/"},
	{in: "/a/../", want: "/"},
	{in: "/a/b/../../c", want: "/c"},
	{in: "/a/./b/.", want: "/a/b"},

	// Percent-encoding normalization (RFC 3986 §2.3, §6.2.2.2).
	{in: "/%61pi", want: "/api"},
	{in: "/%41%5a%7e%2D%5f%30", want: "/AZ~-_0"},
	{in: "/%7e", want: "/~"},
	{in: "/caf%c3%a9", want: "/caf%C3%A9"},
	{in: "/a%3fb", want: "/a%3Fb"},
	{in: "/a%3Bb", want: "/a%3Bb"}, // reserved: kept escaped
	{in: "/api/%2e%2e/x", want: "/x"},
	{in: "/api/%2E/x", want: "/api/x"},
	{in: "/api/.%2e/x", want: "/x"},
	{in: "/%2e%2e%2e", want: "/..."},

	// Bytes that are valid only escaped are escaped.
	{in: "/a b", want: "/a%20b"},
	{in: "/a?b#c", want: "/a%3Fb%23c"},
	{in: "/café", want: "/caf%C3%A9"},
	{in: "/{x}|^`<>\"", want: "/%7Bx%7D%7C%5E%60%3C%3E%22"},

	// Refused.
	{in: "a", bad: true},
	{in: "a/b", bad: true},
	{in: "*", bad: true},
	{in: "/..", bad: true},
	{in: "/../a", bad: true},
	{in: "/a/../..", bad: true},
	{in: "/a/%2e%2e/%2E%2E/b", bad: true},
	{in: "/a/%2Fb", bad: true},
	{in: "/a/%2fb", bad: true},
	{in: "/a%5Cb", bad: true},
	{in: "/a%5cb", bad: true},
	{in: "/a\\b", bad: true},
	{in: "/a%00", bad: true},
	{in: "/a\x00b", bad: true},
	{in: "/a\nb", bad: true},
	{in: "/a\rb", bad: true},
	{in: "/a\tb", bad: true},
	{in: "/a\x7fb", bad: true},
	{in: "/%", bad: true},
	{in: "/a%", bad: true},
	{in: "/%4", bad: true},
	{in: "/%G1", bad: true},
	{in: "/%1G", bad: true},
	{in: "/%%41", bad: true},
	{in: "/public/..;/admin", bad: true},
	{in: "/public/.;x/admin", bad: true},
	{in: "/public/%2e%2e;/admin", bad: true},
	// A slash that is refused is refused even when a later segment would
	// have made the path valid.
	{in: "/a/%2F/..", bad: true},
}

func TestClean(t *testing.T) {
	for _, tt := range cleanTests {
		got, err := Clean(tt.in)
		if tt.bad {
			if err == nil || !errors.Is(err, ErrBadPath) {
				t.Errorf("Clean(%q) = %q, %v; want an error wrapping ErrBadPath", tt.in, got, err)
			}
			if got != "" {
				t.Errorf("Clean(%q) returned %q with its error; want \"\"", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestCleanErrorsSayWhy(t *testing.T) {
	for in, want := range map[string]string{
		"a":        "does not start with '/'",
		"/a%2Fb":   "encoded slash",
		"/a%5Cb":   "backslash",
		"/a%00":    "NUL",
		"/a\x01":   "control byte",
		"/%G1":     "malformed",
		"/..":      "above the root",
		"/x/..;/y": "parameters",
	} {
		_, err := Clean(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Clean(%q) error = %v; want it to mention %q", in, err, want)
		}
	}
}

// Cleaning is idempotent: a cleaned path is clean.
func TestCleanIdempotent(t *testing.T) {
	for _, tt := range cleanTests {
		once, err := Clean(tt.in)
		if err != nil {
			continue
		}
		twice, err := Clean(once)
		if err != nil || twice != once {
			t.Errorf("Clean(Clean(%q)) = %q, %v; want %q", tt.in, twice, err, once)
		}
	}
}

// A clean path is returned as it is, without allocating.
func TestCleanDoesNotAllocateWhenClean(t *testing.T) {
	for _, p := range []string{"/", "/api/v1/users/42", "/caf%C3%A9/a;b=c", "/a%3Fb"} {
		var got string
		if n := testing.AllocsPerRun(100, func() { got, _ = Clean(p) }); n != 0 {
			t.Errorf("Clean(%q) allocated %v times; want 0", p, n)
		}
		if got != p {
			t.Errorf("Clean(%q) = %q", p, got)
		}
	}
	// Refusing a bad path does not allocate either.
	if n := testing.AllocsPerRun(100, func() { _, _ = Clean("/a/%2Fb/c") }); n != 0 {
		t.Errorf("refusing a path allocated %v times; want 0", n)
	}
	// A dirty path costs the result only.
	if n := testing.AllocsPerRun(100, func() { _, _ = Clean("/a//b/./c/../d/") }); n != 1 {
		t.Errorf("cleaning a dirty path allocated %v times; want 1", n)
	}
}

// checkClean fails t unless out is a clean path: it starts with '/', has no
// empty or dot segment, no trailing slash unless it is "/", only bytes that
// may appear raw in a path and upper-case escapes of bytes that are neither
// unreserved, '/', '\' nor NUL, and it is its own cleaned form.
func checkClean(t *testing.T, in, out string) {
	t.Helper()
	if out == "" || out[0] != '/' {
		t.Fatalf("Clean(%q) = %q: does not start with '/'", in, out)
	}
	if out != "/" {
		for seg := range strings.SplitSeq(out[1:], "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("Clean(%q) = %q: has the segment %q", in, out, seg)
			}
		}
	}
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch class[c] {
		case cUnreserved, cKeep, cSlash:
			continue
		case cPercent:
			if i+2 >= len(out) || !isUpperHex(out[i+1]) || !isUpperHex(out[i+2]) {
				t.Fatalf("Clean(%q) = %q: bad escape at %d", in, out, i)
			}
			v := byte(unhex(out[i+1])<<4 | unhex(out[i+2]))
			if v == 0 || v == '/' || v == '\\' || class[v] == cUnreserved {
				t.Fatalf("Clean(%q) = %q: escape %s should not be there", in, out, out[i:i+3])
			}
			i += 2
		default:
			t.Fatalf("Clean(%q) = %q: raw byte %#x", in, out, c)
		}
	}
	if again, err := Clean(out); err != nil || again != out {
		t.Fatalf("Clean(Clean(%q)) = %q, %v; want %q", in, again, err, out)
	}
	// The result is a valid escaped path that net/url keeps as it is.
	u, err := url.Parse(out)
	if err != nil || u.EscapedPath() != out {
		t.Fatalf("Clean(%q) = %q: net/url reads it as %q, %v", in, out, u.EscapedPath(), err)
	}
}

func FuzzClean(f *testing.F) {
	for _, tt := range cleanTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Clean(in)
		// The fast path agrees with the full one.
		slow, slowErr := clean(in)
		if out != slow || (err == nil) != (slowErr == nil) {
			t.Fatalf("Clean(%q) = %q, %v but clean = %q, %v", in, out, err, slow, slowErr)
		}
		if err == nil && out == in && !isClean(in) {
			t.Fatalf("isClean(%q) = false, but the path is clean", in)
		}
		if err != nil {
			if !errors.Is(err, ErrBadPath) || out != "" {
				t.Fatalf("Clean(%q) = %q, %v", in, out, err)
			}
			return
		}
		checkClean(t, in, out)
	})
}

func BenchmarkClean(b *testing.B) {
	for _, bm := range []struct{ name, path string }{
		{"clean", "/api/v1/users/42/orders"},
		{"clean-escaped", "/api/v1/search/caf%C3%A9"},
		{"dirty", "/api//v1/./users/%34%32/../42/orders/"},
		{"dirty-lowercase-hex", "/api/v1/search/caf%c3%a9"},
		{"bad", "/api/v1/%2e%2e/%2e%2e/%2e%2e/etc"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = Clean(bm.path)
			}
		})
	}
}
