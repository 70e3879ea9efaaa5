package yamlnode

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type testItem struct {
	Name string `yaml:"name"`
	Line int    `yaml:"-"`
}

type testDoc struct {
	Title string            `yaml:"title"`
	Count *int64            `yaml:"count"`
	On    bool              `yaml:"on"`
	Ratio float64           `yaml:"ratio"`
	Items []testItem        `yaml:"items"`
	Tags  map[string]string `yaml:"tags"`
	Sub   *testItem         `yaml:"sub"`
	Upper string            `yaml:"upper"`
}

// decodeTest decodes src into a testDoc and returns it with the decoder's
// problems as "LINE: MESSAGE".
func decodeTest(t *testing.T, src string, c DecoderConfig) (*testDoc, *Decoder, []string) {
	t.Helper()
	root, p := Parse([]byte(src), testMessages)
	if p != nil {
		t.Fatalf("Parse: line %d: %s", p.Line, p.Msg)
	}
	c.File = "t.yaml"
	c.TooManyNodes = "too many nodes"
	c.Kinds = map[reflect.Type]string{reflect.TypeFor[[]testItem](): "a list of items"}
	c.Scalars = map[reflect.Type]func(string) (any, error){}
	d := NewDecoder(root, c)
	var doc testDoc
	d.Decode(root, &doc, "")
	var got []string
	for _, e := range Sort(d.Errs) {
		got = append(got, fmt.Sprintf("%d: %s", e.Line, e.Msg))
	}
	return &doc, d, got
}

func TestDecode(t *testing.T) {
	doc, d, got := decodeTest(t, `
title: hello
count: 0
on: true
ratio: 1.5
items:
  - name: a
  - {name: b}
tags: {x: "1"}
sub: {name: s}
`, DecoderConfig{})
	if len(got) > 0 {
		t.Fatalf("problems: %q", got)
	}
	want := testDoc{Title: "hello", Count: new(int64), On: true, Ratio: 1.5,
		Items: []testItem{{"a", 7}, {"b", 8}}, Tags: map[string]string{"x": "1"}, Sub: &testItem{"s", 10}}
	if !reflect.DeepEqual(*doc, want) {
		t.Errorf("decoded %+v, want %+v", *doc, want)
	}
	for path, line := range map[string]int{"": 2, "title": 2, "count": 3, "items": 6, "items[1]": 8, "items[1].name": 8, "tags.x": 9, "sub.name": 10} {
		if got := d.Line(path); got != line {
			t.Errorf("Line(%q) = %d, want %d", path, got, line)
		}
	}
	// A path left out is at the line of the nearest value given.
	if got := d.Line("sub.nothing"); got != 10 {
		t.Errorf("Line(sub.nothing) = %d, want 10", got)
	}
	if d.Has("upper") || !d.Has("count") {
		t.Errorf("Has: upper %v, count %v", d.Has("upper"), d.Has("count"))
	}
}

func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		c         DecoderConfig
		want      []string
		bad       []string // paths Bad
		undecoded []string // paths Failed
	}{
		{name: "wrong kinds", src: `
title: [a]
count: 1.5
on: yes
ratio: x
items: {name: a}
sub: 5
`, want: []string{
			`2: title: want a string, got a list`,
			`3: count: want a whole number, got "1.5"`,
			`4: on: want true or false, got "yes"`,
			`5: ratio: want a number, got "x"`,
			`6: items: want a list of items, got a mapping`,
			`7: sub: want a mapping of keys to values, got "5"`,
		}, bad: []string{"title", "count", "on", "ratio", "items", "sub"}, undecoded: []string{"title", "count", "on", "ratio", "items", "sub"}},
		{name: "YAML 1.1 bools", src: "on: yes\n", c: DecoderConfig{YAML11Bools: true}},
		{name: "unknown keys: a hint, or nothing", src: "titel: x\nzzz: 1\n", want: []string{
			`1: unknown key "titel" (did you mean "title"?)`, `2: unknown key "zzz"`}},
		{name: "unknown keys: a hint, or the keys in field order", src: "items: [{nam: x, zzz: 1}]\n", c: DecoderConfig{ListKnown: true}, want: []string{
			`1: items[0]: unknown key "nam" (did you mean "name"?)`, `1: items[0]: unknown key "zzz" (name)`}},
		// "title" and "tags" are as close to "tale"; the first wins.
		{name: "a tie in field order", src: "tale: 1\n", want: []string{`1: unknown key "tale" (did you mean "title"?)`}},
		{name: "a tie sorted", src: "tale: 1\n", c: DecoderConfig{HintSorted: true}, want: []string{`1: unknown key "tale" (did you mean "tags"?)`}},
		{name: "a repeated key at the mapping", src: "sub:\n  name: a\n  name: b\n", want: []string{
			`3: sub: key "name" repeated (first at line 2)`}, bad: []string{"sub"}},
		{name: "a repeated key at its own path", src: "sub:\n  name: a\n  name: b\n", c: DecoderConfig{RepeatedAtKey: true}, want: []string{
			`3: sub.name: key "name" repeated (first at line 2)`}, bad: []string{"sub.name"}},
		{name: "a null entry", src: "items:\n  - ~\n  -\n", c: DecoderConfig{EmptyEntry: "empty entry"}, want: []string{
			`2: items[0]: empty entry`, `3: items[1]: empty entry`}, bad: []string{"items[0]", "items[1]"}, undecoded: []string{"items[0]", "items[1]"}},
		{name: "a null entry of the wrong kind", src: "n: &n ~\nitems:\n  - ~\n  - *n\n", want: []string{
			`1: unknown key "n"`,
			`1: items[1]: want a value, got "~"`,
			`3: items[0]: want a value, got "~"`,
		}, bad: []string{"items[0]", "items[1]"}},
		{name: "an alias loop", src: "sub: &s {<<: *s}\n", want: []string{`1: sub: alias *s refers to itself`}, bad: []string{"sub"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d, got := decodeTest(t, tt.src, tt.c)
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, p := range tt.bad {
				if !d.Bad[p] {
					t.Errorf("%s is not Bad", p)
				}
			}
			for _, p := range tt.undecoded {
				if !d.Failed(p) {
					t.Errorf("%s is not Failed", p)
				}
			}
			if len(d.Bad) != len(tt.bad) {
				t.Errorf("Bad = %v, want %v", d.Bad, tt.bad)
			}
		})
	}
}

// A null is a key left out, or, with NullIsValue, a value given: the empty
// string, and neither a bool nor a number. A null mapping or list is left
// out either way.
func TestDecodeNull(t *testing.T) {
	const src = "title: ~\ncount: ~\non:\nitems: ~\nsub: ~\n"
	doc, d, got := decodeTest(t, src, DecoderConfig{})
	if len(got) > 0 || doc.Count != nil || doc.Items != nil || doc.Sub != nil || d.Has("title") || d.Has("items") {
		t.Errorf("nulls as keys left out: %+v, problems %q, lines %v", *doc, got, d.Lines)
	}
	doc, d, got = decodeTest(t, src, DecoderConfig{NullIsValue: true})
	want := []string{`2: count: want a whole number, got "~"`, `3: on: want true or false, got ""`}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
	if doc.Items != nil || doc.Sub != nil || !d.Has("title") || !d.Has("items") || !d.Has("sub") {
		t.Errorf("nulls as values: %+v, lines %v", *doc, d.Lines)
	}
}

func TestNilIndex(t *testing.T) {
	var x *Index
	if x.Line("a") != 0 || x.Has("a") || x.Failed("a") {
		t.Error("a nil Index places a path")
	}
}

func TestErrors(t *testing.T) {
	cause := fs.ErrNotExist
	es := Errors{
		{File: "f", Line: 3, Msg: "c"},
		{File: "f", Line: 1, Msg: "a"},
		{File: "f", Line: 3, Msg: "b"},
		{File: "f", Line: 1, Msg: "a"},
		WithCause(Error{File: "f", Msg: "cannot read"}, cause),
	}
	got := Sort(slices.Clone(es)).Error()
	if want := "f: cannot read\nf:1: a\nf:3: c\nf:3: b"; got != want {
		t.Errorf("Sort = %q, want %q", got, want)
	}
	if errors.Is(es[:3], cause) || !errors.Is(es, cause) {
		t.Error("errors.Is does not find the cause")
	}
	var e Error
	if !errors.As(error(Errors{{File: "f", Line: 2, Msg: "m"}}), &e) || e.Warning() != "f:2: warning: m" {
		t.Errorf("errors.As = %+v; Warning %q", e, e.Warning())
	}
}
