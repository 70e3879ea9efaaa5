package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	// Time zones load from the binary itself, so a limit's tz works on a
	// minimal container image without /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Load reads and parses the config file at path. On failure the error is an
// Errors value.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return nil, Errors{{File: path, Msg: msg, err: err}}
	}
	return Parse(path, data)
}

// Parse decodes, defaults and validates a config; filename is what errors
// and Summary call it. On failure the error is an Errors value holding every
// problem found, sorted by line.
func Parse(filename string, data []byte) (*Config, error) {
	root, err := parseYAML(filename, data)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	cfg.File = filename
	d := newDecoder(filename, root)
	d.lines[""] = root.Line
	d.decode(root, reflect.ValueOf(cfg).Elem(), "")
	v := &validator{file: filename, lines: d.lines, bad: d.bad, lookupEnv: os.LookupEnv}
	if d.budget >= 0 {
		v.config(cfg)
	}
	errs := append(d.errs, v.errs...)
	if len(errs) > 0 {
		return nil, errs.sort()
	}
	cfg.messages = v.messages
	return cfg, nil
}

// parseYAML returns the top-level mapping of the file's one document.
func parseYAML(filename string, data []byte) (root *yaml.Node, err error) {
	fail := func(line int, format string, args ...any) (*yaml.Node, error) {
		return nil, Errors{{File: filename, Line: line, Msg: fmt.Sprintf(format, args...)}}
	}
	// yaml.v3 reports malformed input by panicking internally and
	// recovering; guard against a panic it does not recover, so a
	// malformed file is an error, never a crash of "floodgate serve".
	defer func() {
		if r := recover(); r != nil {
			root, err = fail(1, "cannot parse YAML: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fail(1, "empty config")
		}
		line, msg := yamlErrorLine(err, data)
		return fail(line, "%s", msg)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = next.Line
		} else {
			line, _ = yamlErrorLine(err, data)
		}
		return fail(max(line, 1), "a config file holds one YAML document; remove the second (---)")
	}
	if len(doc.Content) == 0 {
		return fail(1, "empty config")
	}
	top := doc.Content[0]
	if top.Kind == yaml.AliasNode && top.Alias != nil {
		top = top.Alias
	}
	if isNull(top) {
		return fail(1, "empty config")
	}
	if top.Kind != yaml.MappingNode {
		return fail(top.Line, "the config must be a mapping of keys (server, routes, ...), got %s", describe(top))
	}
	return top, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlErrorLine splits a yaml.v3 syntax error into its line and message.
// Some of its errors carry no line ("found character that cannot start any
// token", "unknown anchor"); for those, the line is found as the shortest
// prefix of the file that fails with the same message.
func yamlErrorLine(err error, data []byte) (int, string) {
	s := err.Error()
	reported := 0
	msg := strings.TrimPrefix(s, "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(s); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil && line > 0 {
			reported, msg = line, m[2]
		}
	}
	// The parser's line is where the construct it was reading began (for
	// a bad entry in a block sequence, the sequence's first line), so the
	// line shown is the first one whose prefix of the file fails with the
	// same error: where the file stops making sense.
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
