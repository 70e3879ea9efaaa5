package yamlnode

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var testMessages = ParseMessages{
	Empty:          "empty file",
	SecondDocument: "one document only",
	NotMapping:     "want a mapping",
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int    // 0: no problem
		msg  string // the problem's message, or its prefix ending in "..."
	}{
		{"a mapping", "a: 1\nb: 2\n", 0, ""},
		{"a mapping through an alias", "&top {a: 1}\n", 0, ""},
		{"nothing", "", 1, "empty file"},
		{"blank lines", "\n\n", 1, "empty file"},
		{"only a comment", "# nothing\n", 1, "empty file"},
		{"only a document marker", "---\n", 1, "empty file"},
		{"only a null", "~\n", 1, "empty file"},
		{"a second document", "a: 1\n---\nb: 2\n", 2, "one document only"},
		{"a second document that does not parse", "a: 1\n---\nb: [\n", 3, "one document only"},
		{"a list", "\n- a\n- b\n", 2, `want a mapping, got a list`},
		{"a scalar", "hello\n", 1, `want a mapping, got "hello"`},
		{"a long scalar", strings.Repeat("x", 50) + "\n", 1, `want a mapping, got "` + strings.Repeat("x", 40) + `..."`},
		// yaml.v3 says line 2, where the sequence begins; the file stops
		// making sense at line 4.
		{"a bad sequence entry", "a:\n  - b\n  - c\n d: e\n", 4, "invalid YAML: ..."},
		{"an unclosed flow", "a: 1\nb: [1, 2\n", 2, "invalid YAML: ..."},
		// yaml.v3 gives no line for an unknown anchor.
		{"an unknown anchor", "a: 1\nb: 2\nc: *nowhere\n", 3, "invalid YAML: unknown anchor 'nowhere' referenced"},
		{"a tab", "a:\n\t- b\n", 2, "invalid YAML: ..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, p := Parse([]byte(tt.src), testMessages)
			if tt.line == 0 {
				if p != nil || root == nil {
					t.Fatalf("Parse = %v, %+v; want the top mapping", root, p)
				}
				if root.Kind != yaml.MappingNode {
					t.Errorf("root is kind %v, want a mapping", root.Kind)
				}
				return
			}
			if p == nil {
				t.Fatalf("Parse succeeded; want line %d: %s", tt.line, tt.msg)
			}
			if root != nil {
				t.Errorf("Parse returned a root with a problem")
			}
			ok := p.Msg == tt.msg
			if prefix, cut := strings.CutSuffix(tt.msg, "..."); cut {
				ok = strings.HasPrefix(p.Msg, prefix) && len(p.Msg) > len(prefix)
			}
			if p.Line != tt.line || !ok {
				t.Errorf("Parse = line %d: %s; want line %d: %s", p.Line, p.Msg, tt.line, tt.msg)
			}
		})
	}
}

// FuzzParse feeds Parse arbitrary bytes: it must never panic, and a
// problem has a line and a message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "~", "a: 1", "- a", "a: [", "a: &a [*a]", "<<: {}", "a: 1\n---\nb: 2", "\t- x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, p := Parse(data, testMessages)
		if (root == nil) == (p == nil) {
			t.Fatalf("Parse = %v, %+v: want exactly one", root, p)
		}
		if p != nil && (p.Line < 1 || p.Msg == "") {
			t.Fatalf("bad problem %+v", p)
		}
	})
}
