package yamlnode

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// IsNull reports whether n is a null scalar: "~", "null", or a key with
// nothing after it.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Describe names a node's value for an error message: "a mapping", "a
// list", or the scalar quoted, cut at 40 bytes so that a long value does
// not swamp the message.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if len(n.Value) > 40 {
		return strconv.Quote(n.Value[:40] + "...")
	}
	return strconv.Quote(n.Value)
}
