package upstream

import (
	"net/url"
	"testing"
)

func TestPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ target, strip, path, decoded, escaped string }{
		{"http://u", "", "/api/x", "/api/x", "/api/x"},
		{"http://u/base", "", "/api/x", "/base/api/x", "/base/api/x"},
		{"http://u/base/", "", "/", "/base", "/base"},
		{"http://u", "/svc", "/svc/a", "/a", "/a"},
		{"http://u", "/svc/", "/svc", "/", "/"},
		{"http://u", "/svc", "/svcx/a", "/svcx/a", "/svcx/a"}, // not at a segment boundary
		{"http://u", "/", "/a", "/a", "/a"},
		{"http://u/b", "/svc", "/svc/a%20b", "/b/a b", "/b/a%20b"},
	} {
		target, _ := url.Parse(tc.target)
		d, e := Path(target, tc.strip, tc.path)
		if d != tc.decoded || e != tc.escaped {
			t.Errorf("Path(%s, %q, %q) = %q, %q; want %q, %q", tc.target, tc.strip, tc.path, d, e, tc.decoded, tc.escaped)
		}
	}
}
