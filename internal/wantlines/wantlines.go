// Package wantlines checks the errors a parser reports for a test source
// against "#want: TEXT" comments written on the lines they concern, so
// that a table of bad inputs states each expected error where it belongs.
package wantlines

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

var wantRE = regexp.MustCompile(`#want: (.*)$`)

// Problem is one error a parser reported: its line and its message.
type Problem struct {
	Line int
	Msg  string
}

type want struct {
	line int
	text string
}

// Check fails t unless got are exactly the errors src's "#want: TEXT"
// comments name: one error at the comment's line whose message contains
// TEXT (" | " separates several on one line). all is the parser's whole
// error, logged with the numbered source when the check fails.
func Check(t testing.TB, src string, got []Problem, all error) {
	t.Helper()
	var wants []want
	for i, l := range strings.Split(src, "\n") {
		if m := wantRE.FindStringSubmatch(l); m != nil {
			for _, text := range strings.Split(m[1], " | ") {
				wants = append(wants, want{i + 1, strings.TrimSpace(text)})
			}
		}
	}
	if len(wants) == 0 {
		t.Fatal("the case has no #want: comment")
	}
	used := make([]bool, len(got))
	for _, w := range wants {
		found := false
		for i, p := range got {
			if !used[i] && p.Line == w.line && strings.Contains(p.Msg, w.text) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no error at line %d containing %q", w.line, w.text)
		}
	}
	for i, p := range got {
		if !used[i] {
			t.Errorf("unexpected error at line %d: %s", p.Line, p.Msg)
		}
	}
	if t.Failed() {
		t.Logf("all errors:\n%v\nsource:\n%s", all, Numbered(src))
	}
}

// Numbered is src with line numbers, for failure messages.
func Numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}
