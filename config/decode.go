package config

import (
	"encoding"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
	"github.com/floodgate-gw/floodgate/limit"
)

// decoder fills a Config from a YAML node tree. It works on nodes rather
// than through yaml.Unmarshal so that every problem has a line, so that it
// can go on after one and report the rest, and so that a repeated key, which
// yaml.v3 accepts silently when decoding into a Node, is an error. Its
// Reader follows aliases within a budget of nodes and resolves merge keys.
type decoder struct {
	*yamlnode.Reader
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

	fields map[reflect.Type]map[string]int
}

func newDecoder(file string, root *yaml.Node) *decoder {
	d := &decoder{
		file:   file,
		lines:  map[string]int{},
		bad:    map[string]bool{},
		fields: map[reflect.Type]map[string]int{},
	}
	d.Reader = yamlnode.NewReader(root, yamlnode.ReaderConfig{
		Report:       func(n *yaml.Node, path, msg string) { d.errorf(n, path, "%s", msg) },
		TooManyNodes: "too many nodes after alias expansion; write the config without nested aliases",
		// A repeated key is reported at its own path, "server.listen:
		// key "listen" repeated", as a value's problems are.
		KeyPath: join,
	})
	return d
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
	if n = d.Follow(n, path); n == nil {
		return
	}
	defer d.Hold(n)()
	if yamlnode.IsNull(n) {
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
			// A block that is there only when the file gives it
			// (server.jwt) gets its defaults when it appears.
			v.Set(reflect.New(t.Elem()))
			if df, ok := v.Interface().(defaulter); ok {
				df.setDefaults()
			}
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
			d.errorf(n, path, "want true or false, got %s", yamlnode.Describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.errorf(n, path, "want true or false, got %s", yamlnode.Describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		// Only an !!int: yaml.v3 would truncate 1.5 to 1, and a quoted
		// "10" is a string that happens to hold digits.
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errorf(n, path, "want a whole number, got %s", yamlnode.Describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			d.errorf(n, path, "want a number, got %s", yamlnode.Describe(n))
			return
		}
		v.SetFloat(f)
	default:
		// Every field type of Config is handled above; this is a
		// programming error, caught by the tests.
		panic("config: cannot decode into " + t.String())
	}
}

// scalar returns the text of a scalar node.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want %s, got %s", want, yamlnode.Describe(n))
		return "", false
	}
	return n.Value, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of keys to values, got %s", yamlnode.Describe(n))
		return
	}
	fields := d.fieldsOf(v.Type())
	if i, ok := fields["\x00line"]; ok {
		v.Field(i).SetInt(int64(n.Line))
	}
	for _, p := range d.Pairs(n, path) {
		name := p.Key.Value
		fpath := join(path, name)
		i, ok := fields[name]
		if !ok || strings.HasPrefix(name, "\x00") {
			msg := fmt.Sprintf("unknown key %q", name)
			if path != "" {
				msg = path + ": " + msg
			}
			if s := yamlnode.Suggest(name, names(fields)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errs = append(d.errs, Error{File: d.file, Line: p.Key.Line, Msg: msg})
			continue
		}
		// A null value is a key left out: it keeps the default, and
		// validation must not take it for a value given.
		if !yamlnode.IsNull(p.Value) {
			d.lines[fpath] = p.Key.Line
		}
		d.decode(p.Value, v.Field(i), fpath)
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

// names lists the YAML names of fieldsOf, sorted, so that of two keys as
// close to a misspelt one the hint always names the same.
func names(fields map[string]int) []string {
	var ns []string
	for k := range fields {
		if !strings.HasPrefix(k, "\x00") {
			ns = append(ns, k)
		}
	}
	slices.Sort(ns)
	return ns
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got %s", yamlnode.Describe(n))
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
		if yamlnode.IsNull(item) {
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
	for _, p := range d.Pairs(n, path) {
		kpath := join(path, p.Key.Value)
		d.lines[kpath] = p.Key.Line
		e := reflect.New(t.Elem()).Elem()
		d.decode(p.Value, e, kpath)
		m.SetMapIndex(reflect.ValueOf(p.Key.Value).Convert(t.Key()), e)
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
		// 10.1.2.3/8 is 10.0.0.0/8 to a router, but may be a slip for
		// 10.1.2.3/32 (or /24): say which was read rather than guess.
		if m := p.Masked(); m != p {
			return netip.Prefix{}, fmt.Errorf("%q has address bits set past its /%d; write %s (or the address alone)", s, p.Bits(), m)
		}
		return p, nil
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
// a host, a port if any in 1..65535, and an optional base path. Errors
// print it with any password hidden.
func parseTarget(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		if strings.Contains(s, "@") {
			s = redactURL(s)
		}
		return nil, fmt.Errorf("%q is not an absolute http(s) URL (write it as http://127.0.0.1:9000)", s)
	}
	shown := redactedURL(u)
	if u.Fragment != "" || strings.Contains(s, "#") {
		return nil, fmt.Errorf("target %q: a fragment is never sent to a server", shown)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("target %q: port %s is outside 1..65535", shown, port)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, fmt.Errorf("target %q: the port after : is missing", shown)
	}
	// The gateway would send neither; refusing them says so.
	if u.User != nil {
		return nil, fmt.Errorf("target %q: credentials in a target are not sent to it; remove them", shown)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return nil, fmt.Errorf("target %q: a target has no query; the request's own query is passed on", shown)
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
		d.errorf(n, path, "want a key value or a list of them, got %s", yamlnode.Describe(n))
	}
}
