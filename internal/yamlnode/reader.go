package yamlnode

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// ReaderConfig says how a Reader reports what it finds.
type ReaderConfig struct {
	// Report receives each problem: the node it is at, the path of the
	// value in the caller's notation ("" at the top), and the message,
	// which does not repeat the path. It must not be nil.
	Report func(n *yaml.Node, path, msg string)
	// TooManyNodes is reported, once, at the node where the budget runs
	// out; it tells the writer what to change ("write the config without
	// nested aliases").
	TooManyNodes string
	// KeyPath, if not nil, writes the path of a key of the mapping at
	// path, and a repeated key is reported at its own path
	// ("server.listen"), so that a caller that marks the paths it
	// reported finds the key marked. If nil, a repeated key is reported
	// at the mapping's path.
	KeyPath func(path, key string) string
}

// A Reader walks a YAML node tree within a budget of nodes, following
// aliases. Aliases make the tree a DAG, and a few kilobytes of nested
// aliases would otherwise expand to billions of nodes (the "billion
// laughs"). A Reader is for one tree, and one goroutine.
type Reader struct {
	c    ReaderConfig
	left int
	// active holds the anchored nodes being read, to refuse an alias
	// inside an anchor that refers to the anchor itself: read on, it
	// would only end with the budget, as "too many nodes" rather than as
	// the loop it is.
	active map[*yaml.Node]bool
}

// NewReader returns a Reader for the tree at root. Its budget is ten times
// the nodes the file holds, so that a file may share blocks through
// aliases, and 10,000 more, so that a small file may share them freely.
func NewReader(root *yaml.Node, c ReaderConfig) *Reader {
	return &Reader{c: c, left: 10*countNodes(root) + 10_000, active: map[*yaml.Node]bool{}}
}

func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

// Spend takes one node from the budget, reporting once, at n, when it runs
// out. It reports whether the node may be read.
func (r *Reader) Spend(n *yaml.Node) bool {
	r.left--
	if r.left == -1 {
		r.c.Report(n, "", r.c.TooManyNodes)
	}
	return r.left >= 0
}

// Spent reports whether the budget ran out. After that a part of the tree
// went unread, so what seems to be missing may only be unread: a caller
// checks Spent before reporting something missing.
func (r *Reader) Spent() bool { return r.left < 0 }

// Follow spends a node from the budget and returns n with an alias
// resolved, or nil after a problem: the budget ran out, or the alias refers
// to an anchor being read (see Hold).
func (r *Reader) Follow(n *yaml.Node, path string) *yaml.Node {
	if !r.Spend(n) {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || r.active[n.Alias] {
			r.c.Report(n, path, "alias *"+n.Value+" refers to itself")
			return nil
		}
		return n.Alias
	}
	return n
}

// Hold marks an anchored node as being read until the returned func runs,
// so that an alias to it inside it is refused: call it as
// defer r.Hold(n)() on a node Follow returned, before reading what it
// holds.
func (r *Reader) Hold(n *yaml.Node) func() {
	if n.Anchor == "" {
		return func() {}
	}
	r.active[n] = true
	return func() { delete(r.active, n) }
}

// Pair is one key and value of a mapping. Key is the node the key is
// written at, for its line; its Value is the key's text.
type Pair struct{ Key, Value *yaml.Node }

// Pairs returns the keys and values of the mapping n, with merge keys ("<<")
// resolved, reporting repeated keys, which yaml.v3 accepts silently when
// decoding into a Node, and keys that are not plain strings. A key written
// in the mapping itself wins over a merged one, as YAML's merge key type
// says (https://yaml.org/type/merge.html). n is not followed: the caller
// has done that.
func (r *Reader) Pairs(n *yaml.Node, path string) []Pair {
	if n.Kind != yaml.MappingNode {
		r.c.Report(n, path, "want a mapping of keys to values, got "+Describe(n))
		return nil
	}
	var own, merged []Pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		// At the key as written, not at the anchor an alias names.
		if k.Kind != yaml.ScalarNode || IsNull(k) {
			r.c.Report(n.Content[i], path, "a key must be a plain string, got "+Describe(k))
			continue
		}
		if k.Tag == "!!merge" {
			merged = append(merged, r.mergePairs(v, path)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			at := path
			if r.c.KeyPath != nil {
				at = r.c.KeyPath(path, k.Value)
			}
			r.c.Report(n.Content[i], at, fmt.Sprintf("key %q repeated (first at line %d)", k.Value, first))
			continue
		}
		seen[k.Value] = n.Content[i].Line
		key := n.Content[i]
		if key != k {
			// A key written as an alias is the string it names, at
			// the place it is written.
			c := *k
			c.Line, c.Column = key.Line, key.Column
			key = &c
		}
		own = append(own, Pair{key, v})
	}
	for _, m := range merged {
		if _, ok := seen[m.Key.Value]; !ok {
			seen[m.Key.Value] = m.Key.Line
			own = append(own, m)
		}
	}
	return own
}

// mergePairs reads the value of a merge key: a mapping, or a list of them
// of which the earlier win.
func (r *Reader) mergePairs(n *yaml.Node, path string) []Pair {
	n = r.Follow(n, path)
	if n == nil {
		return nil
	}
	defer r.Hold(n)()
	switch n.Kind {
	case yaml.MappingNode:
		return r.Pairs(n, path)
	case yaml.SequenceNode:
		var all []Pair
		for _, item := range n.Content {
			if item.Kind == yaml.SequenceNode {
				r.c.Report(item, path, "a merge key (<<) takes a mapping or a list of mappings")
				continue
			}
			all = append(all, r.mergePairs(item, path)...)
		}
		return all
	}
	r.c.Report(n, path, "a merge key (<<) takes a mapping or a list of mappings, got "+Describe(n))
	return nil
}
