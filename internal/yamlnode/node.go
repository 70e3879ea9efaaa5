package yamlnode

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// IsNull reports whether n is a null scalar: "~", "null", or a key with
// nothing after it.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Describe names a node's value for an error message: "a mapping", "a
// list", or the scalar quoted, cut at 40 bytes so that a long value does
// not swamp the message. What comes before an "@" is hidden: a value in
// the wrong place may be a URL with a password (redis://u:PASSWORD@host).
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		scheme := ""
		if j := strings.Index(v, "://"); j >= 0 && j < i {
			scheme = v[:j+3]
		}
		v = scheme + "***" + v[i:]
	}
	if len(v) > 40 {
		return strconv.Quote(v[:40] + "...")
	}
	return strconv.Quote(v)
}
