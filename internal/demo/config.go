package demo

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// flashSaleYAML is a copy of examples/flash-sale.yaml, whose limits the
// demo runs: a binary built with go install has no repository to read it
// from. A test fails when the two differ.
//
//go:embed flash-sale.yaml
var flashSaleYAML []byte

// demoRoute is the example's route that the demo drives.
const demoRoute = "lucky-meal"

// demoRedisTimeout is store.redis.timeout when the demo runs on Redis.
const demoRedisTimeout = 250 * time.Millisecond

// demoOverrides are the values of the example that one process on free
// ports cannot keep: where it listens, where the coupon API is, the keys
// the demo signs its users' tokens with, where events go, breaker timings
// short enough to watch, and protection's min when the script's traffic
// is under it.
type demoOverrides struct {
	listen, admin string // host:port
	upstream      string // the coupon API's URL
	jwksFile      string
	eventsFile    string
	redis         string // "": the example's store
	window        time.Duration
	openFor       time.Duration
	protectMin    float64 // 0: the example's
}

// demoConfigFile returns example, a flash-sale configuration, with o's
// values in place of its own and a comment at the top that says so. The
// rest (limits, the breaker's thresholds, the fallback, the responses)
// is the example's, comments included. It works on the YAML tree, not on
// a parsed Config, so that what runs is a file: the one the replay reads,
// and the one the user can read while the demo holds.
func demoConfigFile(example []byte, o demoOverrides) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(example, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping of keys")
	}
	root := doc.Content[0]
	route, err := routeNode(root, demoRoute)
	if err != nil {
		return nil, err
	}
	type edit struct {
		m    *yaml.Node
		path string
		v    any
	}
	edits := []edit{
		{root, "server.listen", o.listen},
		{root, "admin.listen", o.admin},
		{root, "server.jwt.jwks_file", o.jwksFile},
		{root, "events.file.path", o.eventsFile},
		{route, "upstream.targets", []string{o.upstream}},
		{route, "breaker.window", o.window.String()},
		{route, "breaker.open_for", o.openFor.String()},
	}
	changed := []string{"server.listen", "admin.listen", "server.jwt.jwks_file", "events.file.path",
		"routes[id=" + demoRoute + "].upstream.targets", "routes[id=" + demoRoute + "].breaker.window",
		"routes[id=" + demoRoute + "].breaker.open_for"}
	if o.redis != "" {
		// A decision's budget is five times the default: the crowd shares
		// this machine's cores with the gateway, so at the peak a
		// decision waits for a core more than for Redis, and with
		// on_error: deny one past its budget is a 503.
		edits = append(edits,
			edit{root, "store.type", "redis"},
			edit{root, "store.redis", map[string]any{"addrs": []string{o.redis}, "timeout": demoRedisTimeout.String()}})
		changed = append(changed, "store.type", "store.redis")
	}
	if o.protectMin > 0 && mapValue(route, "protect") != nil {
		edits = append(edits, edit{route, "protect.min", o.protectMin})
		changed = append(changed, "routes[id="+demoRoute+"].protect.min")
	}
	for _, e := range edits {
		if err := setYAML(e.m, strings.Split(e.path, "."), e.v); err != nil {
			return nil, fmt.Errorf("%s: %w", e.path, err)
		}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# examples/flash-sale.yaml as floodgate demo runs it. Changed for one process\n"+
		"# on free ports:\n")
	for _, c := range changed {
		fmt.Fprintf(&buf, "#   %s\n", c)
	}
	buf.WriteString("\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// routeNode returns the mapping of the route with the id in the routes of
// root.
func routeNode(root *yaml.Node, id string) (*yaml.Node, error) {
	routes := mapValue(root, "routes")
	if routes == nil || routes.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("no routes")
	}
	for _, r := range routes.Content {
		if v := mapValue(r, "id"); v != nil && v.Kind == yaml.ScalarNode && v.Value == id {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no route %q", id)
}

// mapValue returns the value of key in the mapping m; nil when m is not a
// mapping or has no such key.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setYAML sets the value at path below the mapping m to v, encoded as
// YAML, making the mappings on the way that are missing. A value it
// replaces keeps its style (flow or block) and loses its comment, which
// was about the value it had.
func setYAML(m *yaml.Node, path []string, v any) error {
	for i, key := range path {
		if m.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a mapping", strings.Join(path[:i], "."))
		}
		val := mapValue(m, key)
		if i < len(path)-1 {
			if val == nil {
				val = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, val)
			}
			m = val
			continue
		}
		var n yaml.Node
		if err := n.Encode(v); err != nil {
			return err
		}
		if val == nil {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, &n)
			return nil
		}
		if val.Kind == n.Kind {
			n.Style = val.Style
		}
		*val = n
	}
	return nil
}
