package yamlnode

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DecoderConfig says how a Decoder reads a kind of file. Every field but
// File and TooManyNodes may be left zero.
type DecoderConfig struct {
	// File is the name problems are reported under.
	File string
	// TooManyNodes is reported where the node budget runs out (see
	// ReaderConfig).
	TooManyNodes string
	// RepeatedAtKey reports a repeated key at its own path
	// ("server.listen: key "listen" repeated"), as a value's problems
	// are, marking that path Bad; else at the mapping's path.
	RepeatedAtKey bool
	// ListKnown lists a struct's keys, in field order, after an unknown
	// key no known one is close to: "unknown key "x" (a, b, c)".
	ListKnown bool
	// HintSorted takes the "did you mean" hint for an unknown key from
	// the keys sorted by name, else in field order: of two keys as close
	// to the unknown one, the first wins.
	HintSorted bool
	// NullIsValue reads a null written for a scalar as a value the file
	// gives: the empty string for a string, and neither a bool nor a
	// number. Else a null is a key left out, and keeps what the value
	// held. Either way, a null mapping or list is left out.
	NullIsValue bool
	// YAML11Bools accepts yes, no, on and off (and y, n) for a bool, as a
	// YAML 1.1 parser does; else only true and false.
	YAML11Bools bool
	// EmptyEntry is reported for a null list entry. If "", a null entry
	// is a value of the wrong kind, reported as one.
	EmptyEntry string
	// Kinds names what a value of a type is, for "want KIND, got ..."
	// when the file gives something else: "a list of descriptors".
	// Without a name, a struct is "a mapping of keys to values" and a
	// slice "a list".
	Kinds map[reflect.Type]string
	// Scalars read the types that are written as one string, such as a
	// time.Duration: a non-nil error is reported at the value.
	Scalars map[reflect.Type]func(s string) (any, error)
	// Custom read the types that read a node themselves; the node is not
	// null, and aliases are resolved.
	Custom map[reflect.Type]func(d *Decoder, n *yaml.Node, v reflect.Value, path string)
	// New, if not nil, is called with each struct the Decoder makes for a
	// pointer (a field, or a list's entry), before it is read: it sets
	// the struct's defaults.
	New func(v reflect.Value)
}

// Index says where the values of a decoded file are written, so that a
// problem found after decoding, by a validation that sees only Go values,
// is reported at the line of the value at fault. Paths are written as
// errors write them: "server.listen", "routes[0]",
// "routes[0].limits[1].rate", and "" for the whole file.
type Index struct {
	// Lines holds the line of every path the file gives: the line of its
	// key, or of its list entry. A null value is not given, unless
	// NullIsValue.
	Lines map[string]int
	// Bad holds the paths at which a problem was reported while
	// decoding: their values are not what the file meant, so that a
	// validation does not pile a second, confusing error on the first.
	Bad map[string]bool
	// Undecoded holds the paths of Bad whose value was not decoded at
	// all: of the wrong kind, or not parsed. A mapping with a repeated
	// key is Bad but decoded, and its other keys are as the file says.
	Undecoded map[string]bool
}

// Line returns the line of path, or of the nearest enclosing value the file
// gives when path itself is left out; 0 for a nil Index.
func (x *Index) Line(path string) int {
	if x == nil {
		return 0
	}
	for {
		if l, ok := x.Lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = Parent(path)
	}
}

// Has reports whether the file gives the value at path.
func (x *Index) Has(path string) bool {
	if x == nil {
		return false
	}
	_, ok := x.Lines[path]
	return ok
}

// Failed reports whether the value at path was not decoded: the Go value
// holds nothing the file gave there.
func (x *Index) Failed(path string) bool {
	return x != nil && x.Undecoded[path]
}

// Parent returns the path of the value that holds the one at path: "a.b"
// for "a.b.c" and for "a.b[2]", "" at the top.
func Parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// Join returns the path of key in the mapping at path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// A Decoder fills Go values from a YAML node tree, as yaml.v3's Decode
// does, but reports every problem with its line and goes on after one to
// report the rest; refuses unknown keys, with the closest known one as a
// hint; reports repeated keys, which yaml.v3 accepts silently when decoding
// into a Node; and resolves aliases within the budget of its Reader.
//
// A struct's fields are read by their yaml tags; a field `Line int` tagged
// yaml:"-" receives the line of the struct's mapping.
type Decoder struct {
	*Reader
	Index
	// Errs holds the problems found, in the order found; see Sort.
	Errs Errors

	c      DecoderConfig
	fields map[reflect.Type]*fieldSet
}

// NewDecoder returns a Decoder for the tree at root, as Parse returns it.
func NewDecoder(root *yaml.Node, c DecoderConfig) *Decoder {
	d := &Decoder{
		Index:  Index{Lines: map[string]int{"": root.Line}, Bad: map[string]bool{}, Undecoded: map[string]bool{}},
		c:      c,
		fields: map[reflect.Type]*fieldSet{},
	}
	rc := ReaderConfig{
		Report:       func(n *yaml.Node, path, msg string) { d.Errorf(n, path, "%s", msg) },
		TooManyNodes: c.TooManyNodes,
	}
	if c.RepeatedAtKey {
		rc.KeyPath = Join
	}
	d.Reader = NewReader(root, rc)
	return d
}

// Errorf reports a problem with the value at path, at n's line, naming the
// path, and marks the path Bad.
func (d *Decoder) Errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		d.Bad[path] = true
		msg = path + ": " + msg
	}
	d.Errs = append(d.Errs, Error{File: d.c.File, Line: n.Line, Msg: msg})
}

// fail reports that the value at path cannot be decoded.
func (d *Decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.Errorf(n, path, format, args...)
	d.Undecoded[path] = true
}

var textType = reflect.TypeFor[encoding.TextUnmarshaler]()

// Decode sets v, a pointer, from n; path names n in problems.
func (d *Decoder) Decode(n *yaml.Node, v any, path string) {
	d.decode(n, reflect.ValueOf(v).Elem(), path)
}

// decode sets v from n. A null node leaves v as it is, unless NullIsValue
// and v is a scalar.
func (d *Decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n = d.Follow(n, path); n == nil {
		d.Undecoded[path] = true
		return
	}
	defer d.Hold(n)()
	t := v.Type()
	if IsNull(n) && (!d.c.NullIsValue || composite(t)) {
		return
	}
	if f := d.c.Custom[t]; f != nil {
		f(d, n, v, path)
		return
	}
	if f := d.c.Scalars[t]; f != nil {
		s, ok := d.Scalar(n, path, "a string")
		if !ok {
			return
		}
		x, err := f(s)
		if err != nil {
			d.fail(n, path, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(x))
		return
	}
	if reflect.PointerTo(t).Implements(textType) {
		s, ok := d.Scalar(n, path, "a string")
		if !ok {
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Pointer:
		if v.IsNil() {
			// A block that is there only when the file gives it gets
			// its defaults when it appears.
			v.Set(reflect.New(t.Elem()))
			d.made(v.Elem())
		}
		d.decode(n, v.Elem(), path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if IsNull(n) {
			v.SetString("")
		} else if s, ok := d.Scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		var b bool
		tagOK := n.Tag == "!!bool" || d.c.YAML11Bools && n.Tag == "!!str"
		if n.Kind != yaml.ScalarNode || !tagOK || n.Decode(&b) != nil {
			d.fail(n, path, "want true or false, got %s", Describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		// Only an !!int: yaml.v3 would truncate 1.5 to 1, and a quoted
		// "10" is a string that happens to hold digits.
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.fail(n, path, "want a whole number, got %s", Describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			d.fail(n, path, "want a number, got %s", Describe(n))
			return
		}
		v.SetFloat(f)
	default:
		// A caller's types are all handled above; this is a
		// programming error, caught by its tests.
		panic("yamlnode: cannot decode into " + t.String())
	}
}

// composite reports whether t is read from a mapping or a list, following
// pointers.
func composite(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Slice, reflect.Map:
		return true
	}
	return false
}

// made runs New on a struct the Decoder made.
func (d *Decoder) made(v reflect.Value) {
	if d.c.New != nil && v.Kind() == reflect.Struct {
		d.c.New(v)
	}
}

// kind names what t is written as, for "want KIND, got ...".
func (d *Decoder) kind(t reflect.Type, fallback string) string {
	if k, ok := d.c.Kinds[t]; ok {
		return k
	}
	return fallback
}

// Scalar returns the text of a scalar node, reporting any other node as not
// being want ("a string").
func (d *Decoder) Scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want %s, got %s", want, Describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *Decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want %s, got %s", d.kind(v.Type(), "a mapping of keys to values"), Describe(n))
		return
	}
	fs := d.fieldsOf(v.Type())
	if fs.line >= 0 {
		v.Field(fs.line).SetInt(int64(n.Line))
	}
	for _, p := range d.Pairs(n, path) {
		name := p.Key.Value
		fpath := Join(path, name)
		i, ok := fs.index[name]
		if !ok {
			d.unknown(p.Key, path, fs)
			continue
		}
		// A null value is a key left out, unless NullIsValue: it keeps
		// the default, and validation must not take it for a value
		// given.
		if d.c.NullIsValue || !IsNull(p.Value) {
			d.Lines[fpath] = p.Key.Line
		}
		d.decode(p.Value, v.Field(i), fpath)
	}
}

// unknown reports a key that no field of the struct has. It does not mark
// the path Bad: the struct's own values are still as the file says.
func (d *Decoder) unknown(k *yaml.Node, path string, fs *fieldSet) {
	msg := fmt.Sprintf("unknown key %q", k.Value)
	if path != "" {
		msg = path + ": " + msg
	}
	known := fs.names
	if d.c.HintSorted {
		known = fs.sorted
	}
	if s := Suggest(k.Value, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	} else if d.c.ListKnown {
		msg += " (" + strings.Join(fs.names, ", ") + ")"
	}
	d.Errs = append(d.Errs, Error{File: d.c.File, Line: k.Line, Msg: msg})
}

// fieldSet is what a struct type's yaml tags say.
type fieldSet struct {
	index  map[string]int // YAML name → field index
	names  []string       // the YAML names in field order
	sorted []string       // and sorted
	line   int            // the index of the Line field, or -1
}

func (d *Decoder) fieldsOf(t reflect.Type) *fieldSet {
	if fs, ok := d.fields[t]; ok {
		return fs
	}
	fs := &fieldSet{index: map[string]int{}, line: -1}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		switch {
		case tag == "-" && sf.Name == "Line" && sf.Type.Kind() == reflect.Int:
			fs.line = i
		case tag != "" && tag != "-" && sf.IsExported():
			fs.index[tag] = i
			fs.names = append(fs.names, tag)
		}
	}
	fs.sorted = slices.Sorted(slices.Values(fs.names))
	d.fields[t] = fs
	return fs
}

func (d *Decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want %s, got %s", d.kind(t, "a list"), Describe(n))
		return
	}
	et := t.Elem()
	s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		d.Lines[ipath] = item.Line
		e := s.Index(i)
		// Pointer entries are never nil, even after an error: a
		// validation runs over values that failed to decode, to report
		// the rest.
		if et.Kind() == reflect.Pointer {
			e.Set(reflect.New(et.Elem()))
			d.made(e.Elem())
		}
		if IsNull(item) && d.c.EmptyEntry != "" {
			d.fail(item, ipath, "%s", d.c.EmptyEntry)
			continue
		}
		if r := item; d.c.EmptyEntry == "" {
			// A null entry is a value of the wrong kind, written or
			// through an alias.
			if r.Kind == yaml.AliasNode && r.Alias != nil {
				r = r.Alias
			}
			if IsNull(r) {
				d.fail(r, ipath, "want %s, got %s", d.kind(et, "a value"), Describe(r))
				continue
			}
		}
		d.decode(item, e, ipath)
	}
	v.Set(s)
}

func (d *Decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	m := reflect.MakeMap(t)
	for _, p := range d.Pairs(n, path) {
		kpath := Join(path, p.Key.Value)
		d.Lines[kpath] = p.Key.Line
		e := reflect.New(t.Elem()).Elem()
		d.decode(p.Value, e, kpath)
		m.SetMapIndex(reflect.ValueOf(p.Key.Value).Convert(t.Key()), e)
	}
	v.Set(m)
}
