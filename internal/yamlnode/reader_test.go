package yamlnode

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// newTestReader parses src and returns its top mapping and a Reader whose
// problems are appended to *got as "LINE: PATH: MESSAGE".
func newTestReader(t *testing.T, src string, keyPath bool) (*yaml.Node, *Reader, *[]string) {
	t.Helper()
	root, p := Parse([]byte(src), testMessages)
	if p != nil {
		t.Fatalf("Parse: line %d: %s", p.Line, p.Msg)
	}
	got := new([]string)
	c := ReaderConfig{
		Report: func(n *yaml.Node, path, msg string) {
			*got = append(*got, fmt.Sprintf("%d: %s: %s", n.Line, path, msg))
		},
		TooManyNodes: "too many nodes",
	}
	if keyPath {
		c.KeyPath = func(path, key string) string { return path + "." + key }
	}
	return root, NewReader(root, c), got
}

func TestPairs(t *testing.T) {
	tests := []struct {
		name    string
		src     string // the mapping read is the value of m
		keyPath bool
		pairs   string // "key=value ..." in the order Pairs returns them
		reports []string
	}{
		{name: "plain", src: "m: {a: 1, b: 2}", pairs: "a=1 b=2"},
		{name: "a key written as an alias is the string it names", src: "k: &k domain\nm: {*k : d, b: 2}", pairs: "domain=d b=2"},
		{name: "a merge key: own keys win", src: `
base: &b {x: 1, y: 2}
m: {<<: *b, y: 3, z: 4}
`, pairs: "y=3 z=4 x=1"},
		{name: "a list of merge keys: the earlier win", src: `
a: &a {x: a1, y: a2}
b: &b {y: b2, z: b3}
m:
  <<: [*a, *b]
  w: 0
`, pairs: "w=0 x=a1 y=a2 z=b3"},
		{name: "a merge key of an inline mapping", src: "m: {<<: {x: 1}, y: 2}", pairs: "y=2 x=1"},
		{name: "a merged key written in a merged mapping's merge", src: `
a: &a {x: 1}
b: &b {<<: *a, y: 2}
m: {<<: *b}
`, pairs: "y=2 x=1"},
		{name: "a repeated key at the mapping's path", src: "m:\n  a: 1\n  a: 2\n", pairs: "a=1",
			reports: []string{`3: m: key "a" repeated (first at line 2)`}},
		{name: "a repeated key at its own path", src: "m:\n  a: 1\n  a: 2\n", keyPath: true, pairs: "a=1",
			reports: []string{`3: m.a: key "a" repeated (first at line 2)`}},
		{name: "a key that is a list", src: "m:\n  ? [a]\n  : 1\n  b: 2\n", pairs: "b=2",
			reports: []string{`2: m: a key must be a plain string, got a list`}},
		{name: "a null key", src: "m:\n  ~: 1\n", pairs: "",
			reports: []string{`2: m: a key must be a plain string, got "~"`}},
		// At the alias, where the key is written, not at the anchor.
		{name: "a key that is an alias to a mapping", src: "x: &k {a: 1}\nm:\n  *k : 1\n", pairs: "",
			reports: []string{`3: m: a key must be a plain string, got a mapping`}},
		{name: "a merge key of a string", src: "m:\n  <<: x\n  a: 1\n", pairs: "a=1",
			reports: []string{`2: m: a merge key (<<) takes a mapping or a list of mappings, got "x"`}},
		{name: "a merge key of nested lists", src: "m:\n  <<: [[{a: 1}]]\n", pairs: "",
			reports: []string{`2: m: a merge key (<<) takes a mapping or a list of mappings`}},
		{name: "a merge key of its own anchor", src: "m: &m\n  <<: *m\n  a: 1\n", pairs: "a=1",
			reports: []string{`2: m: alias *m refers to itself`}},
		{name: "not a mapping", src: "m: [a]\n", pairs: "",
			reports: []string{`1: m: want a mapping of keys to values, got a list`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, r, got := newTestReader(t, tt.src, tt.keyPath)
			var m *yaml.Node
			for _, p := range r.Pairs(root, "") {
				if p.Key.Value == "m" {
					m = p.Value
				}
			}
			if m = r.Follow(m, "m"); m == nil {
				t.Fatalf("Follow(m) = nil; reports %q", *got)
			}
			defer r.Hold(m)()
			var pairs []string
			for _, p := range r.Pairs(m, "m") {
				pairs = append(pairs, p.Key.Value+"="+p.Value.Value)
			}
			if s := strings.Join(pairs, " "); s != tt.pairs {
				t.Errorf("Pairs = %q, want %q", s, tt.pairs)
			}
			if !slices.Equal(*got, tt.reports) {
				t.Errorf("reports:\n%s\nwant:\n%s", strings.Join(*got, "\n"), strings.Join(tt.reports, "\n"))
			}
		})
	}
}

// walk visits every node below n, as a reader of a whole file does.
func walk(r *Reader, n *yaml.Node, path string) {
	if n = r.Follow(n, path); n == nil {
		return
	}
	defer r.Hold(n)()
	switch n.Kind {
	case yaml.MappingNode:
		for _, p := range r.Pairs(n, path) {
			walk(r, p.Value, path+"."+p.Key.Value)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			walk(r, item, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func TestBudget(t *testing.T) {
	laughs := func(levels, width int) string {
		var b strings.Builder
		b.WriteString("a0: &a0 [x]\n")
		for i := 1; i < levels; i++ {
			fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), width), ","))
		}
		return b.String()
	}
	tests := []struct {
		name  string
		src   string
		spent bool
	}{
		// 9^3 nodes from a few lines: within the budget.
		{"a few shared blocks", laughs(4, 9), false},
		{"a billion laughs", laughs(10, 10), true},
		{"a binary bomb", laughs(40, 2), true},
		{"an alias inside its own anchor", "a: &a [x, *a]\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, r, got := newTestReader(t, tt.src, false)
			done := make(chan struct{})
			go func() {
				defer close(done)
				walk(r, root, "")
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the walk did not end: the aliases were expanded")
			}
			if r.Spent() != tt.spent {
				t.Errorf("Spent = %v, want %v; reports %q", r.Spent(), tt.spent, *got)
			}
			n := 0
			for _, s := range *got {
				if strings.HasSuffix(s, ": too many nodes") {
					n++
				}
			}
			if want := map[bool]int{false: 0, true: 1}[tt.spent]; n != want {
				t.Errorf("%d reports of too many nodes, want %d: %q", n, want, *got)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"domain", "descriptors", "listen", "maxlen", "ab", "ac"}
	tests := []struct{ name, want string }{
		{"domian", "domain"},
		{"descriptor", "descriptors"},
		{"listn", "listen"},
		{"max_len", "maxlen"},
		{"ad", "ab"},      // as close to ac: the first in known wins
		{"zz", ""},        // two edits, more than half the name
		{"xyz", ""},       // nothing close
		{"domainnnn", ""}, // three edits
		{"", ""},
		{strings.Repeat("d", 100), ""}, // too long to measure
	}
	for _, tt := range tests {
		if got := Suggest(tt.name, known); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
