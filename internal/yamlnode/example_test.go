package yamlnode_test

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
)

// A caller parses with its own messages, then reads the mapping with a
// Reader that reports in its own form: here "LINE: PATH: MESSAGE".
func Example() {
	src := []byte(`
defaults: &d {timeout: 5s, retries: 2}
upstream:
  <<: *d
  timeout: 7s
  timeout: 9s
`)
	root, p := yamlnode.Parse(src, yamlnode.ParseMessages{
		Empty:          "empty config",
		SecondDocument: "a config file holds one YAML document",
		NotMapping:     "the config must be a mapping",
	})
	if p != nil {
		fmt.Printf("%d: %s\n", p.Line, p.Msg)
		return
	}
	r := yamlnode.NewReader(root, yamlnode.ReaderConfig{
		Report: func(n *yaml.Node, path, msg string) {
			fmt.Printf("%d: %s: %s\n", n.Line, path, msg)
		},
		TooManyNodes: "too many nodes after alias expansion",
	})
	for _, top := range r.Pairs(root, "") {
		m := r.Follow(top.Value, top.Key.Value)
		if top.Key.Value != "upstream" || m == nil {
			continue
		}
		for _, kv := range r.Pairs(m, "upstream") {
			fmt.Printf("%s = %s (line %d)\n", kv.Key.Value, kv.Value.Value, kv.Key.Line)
		}
	}
	// Output:
	// 6: upstream: key "timeout" repeated (first at line 5)
	// timeout = 7s (line 5)
	// retries = 2 (line 2)
}
