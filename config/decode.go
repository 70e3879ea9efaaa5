package config

import (
	"encoding"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/limit"
)

// decoder fills a Config from a YAML node tree. It works on nodes rather
// than through yaml.Unmarshal so that every problem has a line, so that it
// can go on after one and report the rest, and so that a repeated key, which
// yaml.v3 accepts silently when decoding into a Node, is an error.
type decoder struct {
	file string
	errs Errors

	// lines holds the line of every path the file gives: "server.listen",
	// "routes[0]", "routes[0].limits[1].rate". Validation reports at these
	// lines, and reads presence from them where a zero value alone cannot
	// tell "left out" from "written as zero".
	lines map[string]int

	// bad holds the paths whose values could not be decoded, so that
	// validation does not pile a second, confusing error on the first.
	bad map[string]bool

	// budget bounds the nodes visited. Aliases make a tree a DAG, and a
	// few kilobytes of nested aliases would otherwise expand to billions
	// of nodes (the "billion laughs").
	budget int
	// active holds the anchored nodes being decoded, to refuse an alias
	// inside an anchor that refers to the anchor itself.
	active map[*yaml.Node]bool

	fields map[reflect.Type]map[string]int
}

func newDecoder(file string, root *yaml.Node) *decoder {
	return &decoder{
		file:   file,
		lines:  map[string]int{},
		bad:    map[string]bool{},
		budget: 10*countNodes(root) + 10_000,
		active: map[*yaml.Node]bool{},
		fields: map[reflect.Type]map[string]int{},
	}
}

func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

// errorf reports a problem with the value at path, naming the path.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		d.bad[path] = true
		msg = path + ": " + msg
	}
	d.errs = append(d.errs, Error{File: d.file, Line: n.Line, Msg: msg})
}

// spend takes one node from the budget, reporting once when it runs out.
func (d *decoder) spend(n *yaml.Node) bool {
	d.budget--
	if d.budget == -1 {
		d.errorf(n, "", "too many nodes after alias expansion; write the config without nested aliases")
	}
	return d.budget >= 0
}

// nodeUnmarshaler is implemented by types that read a node themselves.
type nodeUnmarshaler interface {
	unmarshalNode(d *decoder, n *yaml.Node, path string)
}

// defaulter is implemented by list elements with defaults of their own.
type defaulter interface{ setDefaults() }

var (
	durationType  = reflect.TypeFor[time.Duration]()
	rateType      = reflect.TypeFor[limit.Rate]()
	algorithmType = reflect.TypeFor[limit.Algorithm]()
	alignType     = reflect.TypeFor[limit.Align]()
	locationType  = reflect.TypeFor[*time.Location]()
	prefixType    = reflect.TypeFor[netip.Prefix]()
	urlType       = reflect.TypeFor[*url.URL]()
	textType      = reflect.TypeFor[encoding.TextUnmarshaler]()
	nodeType      = reflect.TypeFor[nodeUnmarshaler]()
)

// decode sets v from n. A null node leaves v as it is: "timeout:" with
// nothing after it means the default, as leaving the key out does.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n) {
		return
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil || d.active[target] {
			d.errorf(n, path, "alias *%s refers to itself", n.Value)
			return
		}
		d.decode(target, v, path)
		return
	}
	if n.Anchor != "" {
		d.active[n] = true
		defer delete(d.active, n)
	}
	if isNull(n) {
		return
	}
	t := v.Type()
	if reflect.PointerTo(t).Implements(nodeType) {
		v.Addr().Interface().(nodeUnmarshaler).unmarshalNode(d, n, path)
		return
	}
	switch t {
	case durationType, rateType, algorithmType, alignType, locationType, prefixType, urlType:
		s, ok := d.scalar(n, path, "a string")
		if !ok {
			return
		}
		x, err := parseSpecial(t, s)
		if err != nil {
			d.errorf(n, path, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(x))
		return
	}
	if reflect.PointerTo(t).Implements(textType) {
		s, ok := d.scalar(n, path, "a string")
		if !ok {
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.errorf(n, path, "%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if s, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.errorf(n, path, "want true or false, got %s", describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.errorf(n, path, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		// Only an !!int: yaml.v3 would truncate 1.5 to 1, and a quoted
		// "10" is a string that happens to hold digits.
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errorf(n, path, "want a whole number, got %s", describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			d.errorf(n, path, "want a number, got %s", describe(n))
			return
		}
		v.SetFloat(f)
	default:
		// Every field type of Config is handled above; this is a
		// programming error, caught by the tests.
		panic("config: cannot decode into " + t.String())
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a node's value for an error message.
func describe(n *yaml.Node) string {
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

// scalar returns the text of a scalar node.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want %s, got %s", want, describe(n))
		return "", false
	}
	return n.Value, true
}

// pair is one key and value of a mapping.
type pair struct{ key, value *yaml.Node }

// pairs returns the keys and values of a mapping with merge keys ("<<")
// resolved, reporting repeated keys. A key written in the mapping itself
// wins over a merged one, as YAML's merge key type says.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of keys to values, got %s", describe(n))
		return nil
	}
	var own, merged []pair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.errorf(k, path, "a key must be a plain string, got %s", describe(k))
			continue
		}
		if k.Tag == "!!merge" {
			merged = append(merged, d.mergePairs(val, path)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(n.Content[i], join(path, k.Value), "key %q repeated (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = n.Content[i].Line
		own = append(own, pair{n.Content[i], val})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key.Line
			own = append(own, p)
		}
	}
	return own
}

// mergePairs reads the value of a merge key: a mapping, or a list of them
// of which the earlier win.
func (d *decoder) mergePairs(n *yaml.Node, path string) []pair {
	if !d.spend(n) {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil || d.active[target] {
			d.errorf(n, path, "alias *%s refers to itself", n.Value)
			return nil
		}
		n = target
	}
	if n.Anchor != "" {
		d.active[n] = true
		defer delete(d.active, n)
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.pairs(n, path)
	case yaml.SequenceNode:
		var all []pair
		for _, item := range n.Content {
			if item.Kind == yaml.SequenceNode {
				d.errorf(item, path, "a merge key (<<) takes a mapping or a list of mappings")
				continue
			}
			all = append(all, d.mergePairs(item, path)...)
		}
		return all
	}
	d.errorf(n, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(n))
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of keys to values, got %s", describe(n))
		return
	}
	fields := d.fieldsOf(v.Type())
	if i, ok := fields["\x00line"]; ok {
		v.Field(i).SetInt(int64(n.Line))
	}
	for _, p := range d.pairs(n, path) {
		name := p.key.Value
		fpath := join(path, name)
		i, ok := fields[name]
		if !ok || strings.HasPrefix(name, "\x00") {
			msg := fmt.Sprintf("unknown key %q", name)
			if path != "" {
				msg = path + ": " + msg
			}
			if s := suggest(name, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errs = append(d.errs, Error{File: d.file, Line: p.key.Line, Msg: msg})
			continue
		}
		// A null value is a key left out: it keeps the default, and
		// validation must not take it for a value given.
		if !isNull(p.value) {
			d.lines[fpath] = p.key.Line
		}
		d.decode(p.value, v.Field(i), fpath)
	}
}

// fieldsOf maps the YAML names of a struct's fields to their indexes; a
// "Line int" field tagged yaml:"-" is listed as "\x00line".
func (d *decoder) fieldsOf(t reflect.Type) map[string]int {
	if f, ok := d.fields[t]; ok {
		return f
	}
	f := map[string]int{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		switch {
		case tag == "-" && sf.Name == "Line" && sf.Type.Kind() == reflect.Int:
			f["\x00line"] = i
		case tag != "" && tag != "-" && sf.IsExported():
			f[tag] = i
		}
	}
	d.fields[t] = f
	return f
}

// suggest returns the known key closest to a misspelt one, if any is close.
func suggest(name string, fields map[string]int) string {
	best, bestD := "", 3
	for k := range fields {
		if strings.HasPrefix(k, "\x00") {
			continue
		}
		if dist := editDistance(name, k); dist < bestD || dist == bestD && k < best {
			best, bestD = k, dist
		}
	}
	if bestD > len(name)/2 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", describe(n))
		return
	}
	t := v.Type()
	s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		d.lines[ipath] = item.Line
		e := s.Index(i)
		// Pointer elements are never nil, even after an error: validation
		// runs over a config that failed to decode, to report the rest.
		if t.Elem().Kind() == reflect.Pointer {
			e.Set(reflect.New(t.Elem().Elem()))
			if df, ok := e.Interface().(defaulter); ok {
				df.setDefaults()
			}
		}
		if isNull(item) {
			d.errorf(item, ipath, "empty list entry")
			continue
		}
		d.decode(item, e, ipath)
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	m := reflect.MakeMap(t)
	for _, p := range d.pairs(n, path) {
		kpath := join(path, p.key.Value)
		d.lines[kpath] = p.key.Line
		e := reflect.New(t.Elem()).Elem()
		d.decode(p.value, e, kpath)
		m.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(t.Key()), e)
	}
	v.Set(m)
}

// parseSpecial reads the scalar types of other packages.
func parseSpecial(t reflect.Type, s string) (any, error) {
	switch t {
	case durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (write it as 250ms, 10s or 1m)", s)
		}
		return d, nil
	case rateType:
		return limit.ParseRate(s)
	case algorithmType:
		return limit.ParseAlgorithm(s)
	case alignType:
		switch s {
		case "epoch":
			return limit.AlignEpoch, nil
		case "first":
			return limit.AlignFirst, nil
		}
		return nil, fmt.Errorf("unknown align %q (epoch, first)", s)
	case locationType:
		// "Local" would place windows by each machine's own zone, so two
		// gateways could disagree on where a day begins.
		if s == "" || s == "Local" {
			return nil, fmt.Errorf("tz %q: name a zone, such as UTC or Asia/Shanghai", s)
		}
		loc, err := time.LoadLocation(s)
		if err != nil {
			return nil, fmt.Errorf("unknown time zone %q", s)
		}
		return loc, nil
	case prefixType:
		return parsePrefix(s)
	case urlType:
		return parseTarget(s)
	}
	panic("config: no parser for " + t.String())
}

// parsePrefix reads a CIDR prefix or a bare IP, which is the prefix of that
// one address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	// Client addresses are compared unmapped (SPEC §3.4), so an
	// IPv4-mapped proxy address must be too.
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// parseTarget reads an upstream target: an absolute http or https URL with
// a host.
func parseTarget(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL (write it as http://127.0.0.1:9000)", s)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return nil, fmt.Errorf("target %q: a fragment is never sent to a server", s)
	}
	return u, nil
}

// unmarshalNode reads a one-part key as a scalar and a composite key as a
// list of scalars.
func (kv *KeyValues) unmarshalNode(d *decoder, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.ScalarNode:
		*kv = KeyValues{n.Value}
	case yaml.SequenceNode:
		vals := make(KeyValues, 0, len(n.Content))
		for i, item := range n.Content {
			s, ok := d.scalar(item, path+"["+strconv.Itoa(i)+"]", "a value")
			if !ok {
				return
			}
			vals = append(vals, s)
		}
		*kv = vals
	default:
		d.errorf(n, path, "want a key value or a list of them, got %s", describe(n))
	}
}
