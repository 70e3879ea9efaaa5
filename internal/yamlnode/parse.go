package yamlnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseMessages are what Parse says of a file that is not one mapping, in
// the words of the caller, which knows what the file is for and so what the
// fix is.
type ParseMessages struct {
	// Empty is for a file with no document, or one that is only a null
	// ("~", "---").
	Empty string
	// SecondDocument is for a file with a document after the first.
	SecondDocument string
	// NotMapping is for a top level other than a mapping; ", got " and
	// what it is (Describe) follow it.
	NotMapping string
}

// A Problem is one thing wrong with a file, at a line. It names no file:
// each caller wraps it in its own error type, with the file's name.
type Problem struct {
	Line int // 1-based
	Msg  string
}

// Parse returns the top-level mapping of data's one YAML document, or the
// problem that stops it being one. A file with no document or only a null
// is at line 1.
func Parse(data []byte, m ParseMessages) (root *yaml.Node, p *Problem) {
	fail := func(line int, msg string) (*yaml.Node, *Problem) {
		return nil, &Problem{Line: line, Msg: msg}
	}
	// yaml.v3 reports malformed input by panicking internally and
	// recovering; guard against a panic it does not recover, so that a
	// malformed file is an error, never a crash of "floodgate serve" or
	// of a server reloading its rules.
	defer func() {
		if r := recover(); r != nil {
			root, p = fail(1, fmt.Sprintf("cannot parse YAML: %v", r))
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fail(1, m.Empty)
		}
		return fail(errorLine(err, data))
	}
	// One document: a second, which a YAML stream allows, would be
	// silently ignored by a reader of the first, and whatever it says
	// would not apply.
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		} else {
			line, _ = errorLine(err, data)
		}
		return fail(max(line, 1), m.SecondDocument)
	}
	if len(doc.Content) == 0 {
		return fail(1, m.Empty)
	}
	top := doc.Content[0]
	if top.Kind == yaml.AliasNode && top.Alias != nil {
		top = top.Alias
	}
	if IsNull(top) {
		return fail(1, m.Empty)
	}
	if top.Kind != yaml.MappingNode {
		return fail(top.Line, m.NotMapping+", got "+Describe(top))
	}
	return top, nil
}

var lineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// errorLine splits a yaml.v3 syntax error into its line and message. Some
// of its errors carry no line ("found character that cannot start any
// token", "unknown anchor"), and the line of the others is where the
// construct it was reading began (for a bad entry in a block sequence, the
// sequence's first line). So the line given is the first one whose prefix of
// the file fails with the same error: where the file stops making sense.
func errorLine(err error, data []byte) (int, string) {
	s := err.Error()
	reported := 0
	msg := strings.TrimPrefix(s, "yaml: ")
	if m := lineRE.FindStringSubmatch(s); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil && line > 0 {
			reported, msg = line, m[2]
		}
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var node yaml.Node
		e := yaml.Unmarshal(bytes.Join(lines[:n], nil), &node)
		return e != nil && e.Error() == s
	}
	lo, hi := 1, len(lines)
	if !fails(hi) {
		return max(reported, 1), "invalid YAML: " + msg
	}
	// Bisect, taking a prefix that fails this way to fail so with any
	// line added: a parse error is not undone by what follows it.
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return max(lo, reported), "invalid YAML: " + msg
}
