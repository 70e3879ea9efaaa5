package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
	"github.com/floodgate-gw/floodgate/limit"
)

// Rules are the limits of every domain. The zero value and nil have none.
// Rules are immutable, so one value may serve any number of requests at
// once while a reload builds the next.
type Rules struct {
	domains map[string]*node
	names   []string // sorted
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// Limit is what one descriptor matched. It is shared by every request that
// matches the same rule: callers must not modify it.
type Limit struct {
	// Rule is a validated fixed-window limit.Rule, aligned to the epoch as
	// envoyproxy/ratelimit aligns its windows (now / unit * unit). Nil when
	// Unlimited, and when RequestsPerUnit is 0: a limit that rejects every
	// request, as envoyproxy/ratelimit reads 0, with nothing to count.
	// Its Name depends only on the domain and on the keys and values from
	// the top of the file to this descriptor, so a reload that changes
	// requests_per_unit keeps the counters.
	Rule *limit.Rule
	// Unit is rate_limit.unit, Period its length; UNKNOWN and 0 when
	// Unlimited.
	Unit   rlsv3.RateLimitResponse_RateLimit_Unit
	Period time.Duration
	// RequestsPerUnit is rate_limit.requests_per_unit; 0 when Unlimited.
	RequestsPerUnit uint32
	// Name is rate_limit.name, or "": what other limits' replaces refer to.
	Name      string
	Unlimited bool
	// Shadow is shadow_mode: the limit is counted but never rejects.
	Shadow bool
	// Replaces names the limits this one replaces when both match the
	// descriptors of one request.
	Replaces []string
}

// node is one descriptor of a rule file, or the top of a domain.
type node struct {
	// children holds the nested descriptors by key and value; one
	// without a value is held under an empty Value.
	children map[Entry]*node
	// wild holds, by key, the nested descriptors whose value ends in '*',
	// in file order: envoyproxy/ratelimit takes the first whose prefix
	// matches, not the longest.
	wild  map[string][]wildcard
	limit *Limit
}

type wildcard struct {
	prefix string
	node   *node
}

// Match returns the limit that applies to one descriptor of domain, or nil.
//
// It follows envoyproxy/ratelimit: entry i is looked up among the nested
// descriptors that entry i-1 matched, first by key and exact value, then by
// key and a value prefix ("foo*"), then by key alone; the descriptor's limit
// is that of the node its last entry matched. A descriptor longer or shorter
// than the rules, or one whose last node has no limit, has none.
func (r *Rules) Match(domain string, entries []Entry) *Limit {
	if r == nil || len(entries) == 0 {
		return nil
	}
	n := r.domains[domain]
	if n == nil {
		return nil
	}
	for _, e := range entries {
		n = n.find(e)
		if n == nil {
			return nil
		}
	}
	return n.limit
}

func (n *node) find(e Entry) *node {
	// An empty request value never matches exactly: an empty rule value
	// is a key-only rule, which comes after the wildcards.
	if e.Value != "" {
		if c := n.children[e]; c != nil {
			return c
		}
	}
	for _, w := range n.wild[e.Key] {
		if strings.HasPrefix(e.Value, w.prefix) {
			return w.node
		}
	}
	return n.children[Entry{Key: e.Key}]
}

// Domains lists the domains, sorted.
func (r *Rules) Domains() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// Parse reads one file's content; name is used in error messages. Every
// problem is reported, each as "NAME:LINE: message", joined with
// errors.Join.
func Parse(name string, data []byte) (*Rules, error) {
	f := parseFile(name, data)
	if len(f.errs) > 0 {
		return nil, f.errs.sort().join()
	}
	return build([]*file{f}), nil
}

// LoadDir reads every *.yaml and *.yml file directly in dir (not
// subdirectories), sorted by name. Every problem in every file is reported,
// each as "FILE:LINE: message" (FILE as the path joined from dir), combined
// with errors.Join; on any error it returns nil Rules. The same domain in
// two files is an error (at the second file's domain line). A missing dir
// is an error; an empty dir gives empty Rules.
//
// Names starting with a dot are skipped, as a shell's *.yaml skips them:
// editors keep lock and backup files there (Emacs's .#rules.yaml is a
// dangling symlink), and a Kubernetes ConfigMap mount keeps its ..data
// links there. Symlinks to files are followed, so such a mount works.
func LoadDir(dir string) (*Rules, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, readError(dir, err)
	}
	var (
		files []*file
		errs  lineErrors
		first = map[string]string{} // domain → the file that defined it
	)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			errs = append(errs, readError(path, err))
			continue
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, readError(path, err))
			continue
		}
		f := parseFile(path, data)
		if f.domain != "" {
			if prev, dup := first[f.domain]; dup {
				f.errs = append(f.errs, &lineError{file: path, line: f.domainLine,
					msg: fmt.Sprintf("domain %q is already defined in %s", f.domain, prev)})
			} else {
				first[f.domain] = path
			}
		}
		errs = append(errs, f.errs.sort()...)
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errs.join()
	}
	return build(files), nil
}

func readError(path string, err error) *lineError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &lineError{file: path, msg: "cannot read: " + err.Error()}
}

func build(files []*file) *Rules {
	r := &Rules{domains: make(map[string]*node, len(files))}
	for _, f := range files {
		r.domains[f.domain] = f.root
		r.names = append(r.names, f.domain)
	}
	slices.Sort(r.names)
	return r
}

// lineError is one problem of a rule file, at a line.
type lineError struct {
	file string
	line int // 1-based; 0 when the problem has no line
	msg  string
}

// Error formats the problem as "FILE:LINE: message", the form editors and
// CI annotations recognise, or "FILE: message" when it has no line.
func (e *lineError) Error() string {
	if e.line <= 0 {
		return e.file + ": " + e.msg
	}
	return e.file + ":" + strconv.Itoa(e.line) + ": " + e.msg
}

type lineErrors []*lineError

// sort orders the problems of one file by line, keeping the order of
// discovery within a line, and drops exact repeats: an anchor read through
// several aliases reports its problems once.
func (es lineErrors) sort() lineErrors {
	seen := make(map[lineError]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if !seen[*e] {
			seen[*e] = true
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b *lineError) int { return a.line - b.line })
	return out
}

func (es lineErrors) join() error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// units maps rate_limit.unit, upper-cased as envoyproxy/ratelimit reads it,
// to its window. Week, month and year are the fixed lengths of
// envoyproxy/ratelimit's UnitToDivider (7, 30 and 365 days), whose windows
// start at multiples of that length since the epoch, as an epoch-aligned
// limit.FixedWindow does. Its opt-in calendar month is not supported.
var units = map[string]struct {
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	period time.Duration
}{
	"SECOND": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	"MINUTE": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"HOUR":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"DAY":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"WEEK":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"MONTH":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"YEAR":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

const unitList = "second, minute, hour, day, week, month, year"

// The keys each mapping of a rule file may hold. envoyproxy/ratelimit checks
// keys against one flat list and silently ignores a known key in the wrong
// place (shadow_mode inside rate_limit); here each place has its own list,
// so such a mistake is reported rather than a limit quietly not applied.
var (
	topKeys        = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "shadow_mode", "unlimited", "replaces", "detailed_metric", "descriptors"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "name", "unlimited", "replaces"}
	replacesKeys   = []string{"name"}
)

// parseMessages are what parseFile says of a file that is not one mapping.
var parseMessages = yamlnode.ParseMessages{
	Empty:          "empty: a rule file holds a domain and its descriptors",
	SecondDocument: "a rule file holds one YAML document, for one domain; put the second (after ---) in a file of its own",
	NotMapping:     "want a mapping (domain, descriptors)",
}

// file is one parsed rule file.
type file struct {
	domain     string
	domainLine int
	root       *node
	errs       lineErrors
}

// parser builds the rules of one file from its YAML node tree. It works on
// nodes rather than through yaml.Unmarshal so that every problem has a line
// and so that it can go on after one and report the rest. Its Reader
// follows aliases within a budget of nodes and resolves merge keys.
type parser struct {
	*yamlnode.Reader
	file   string
	domain string
	errs   lineErrors
}

func parseFile(name string, data []byte) *file {
	f := &file{}
	root, prob := yamlnode.Parse(data, parseMessages)
	if prob != nil {
		f.errs = lineErrors{{file: name, line: prob.Line, msg: prob.Msg}}
		return f
	}
	p := &parser{file: name}
	p.Reader = yamlnode.NewReader(root, yamlnode.ReaderConfig{
		Report:       func(n *yaml.Node, path, msg string) { p.errorf(n, path, "%s", msg) },
		TooManyNodes: "too many nodes after alias expansion; write the file without nested aliases",
	})
	f.root = &node{}
	var descriptors *yaml.Node
	for _, kv := range p.Pairs(root, "") {
		switch kv.Key.Value {
		case "domain":
			if s, ok := p.str(kv.Value, "domain"); ok {
				f.domain, f.domainLine = s, kv.Key.Line
				if s == "" {
					p.errorf(kv.Key, "domain", "empty domain: a rule file names the domain its descriptors belong to")
				}
			}
		case "descriptors":
			descriptors = kv.Value
		default:
			p.unknown(kv.Key, "", topKeys)
		}
	}
	if f.domainLine == 0 && !p.Spent() {
		p.errorf(root, "", "domain is missing: a rule file names the domain its descriptors belong to")
	}
	p.domain = f.domain
	if descriptors != nil {
		p.descriptors(descriptors, "descriptors", f.root, nil)
	}
	f.errs = p.errs
	if f.domain == "" {
		f.domainLine = 0
	}
	return f
}

// descriptors reads a list of descriptors into parent. path names the list
// in messages; trail holds the keys and values from the top to parent.
func (p *parser) descriptors(list *yaml.Node, path string, parent *node, trail []Entry) {
	list = p.Follow(list, path)
	if list == nil || yamlnode.IsNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.errorf(list, path, "want a list of descriptors, got %s", yamlnode.Describe(list))
		return
	}
	defer p.Hold(list)()
	first := map[Entry]int{}
	for i, item := range list.Content {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		e, n := p.descriptor(item, ipath, trail)
		if n == nil {
			continue
		}
		if line, dup := first[e]; dup {
			what := fmt.Sprintf("key %q", e.Key)
			if e.Value != "" {
				what += fmt.Sprintf(" value %q", e.Value)
			} else {
				what += " without a value"
			}
			p.errorf(item, ipath, "%s repeated (first at line %d)", what, line)
			continue
		}
		first[e] = item.Line
		if parent.children == nil {
			parent.children = map[Entry]*node{}
		}
		parent.children[e] = n
		if prefix, ok := strings.CutSuffix(e.Value, "*"); ok {
			if parent.wild == nil {
				parent.wild = map[string][]wildcard{}
			}
			parent.wild[e.Key] = append(parent.wild[e.Key], wildcard{prefix, n})
		}
	}
}

// descriptor reads one descriptor and what it nests. It returns a nil node
// when the descriptor has no key, so that it is left out of its parent.
func (p *parser) descriptor(item *yaml.Node, path string, trail []Entry) (Entry, *node) {
	item = p.Follow(item, path)
	if item == nil {
		return Entry{}, nil
	}
	if item.Kind != yaml.MappingNode {
		p.errorf(item, path, "want a descriptor (key, value, rate_limit, descriptors), got %s", yamlnode.Describe(item))
		return Entry{}, nil
	}
	defer p.Hold(item)()
	var (
		e                               Entry
		hasKey, keyBad                  bool
		rateLimit, nested, replacesNode *yaml.Node
		shadow, unlimited               bool
		unlimitedKey, rateKey           *yaml.Node
	)
	for _, kv := range p.Pairs(item, path) {
		fpath := path + "." + kv.Key.Value
		switch kv.Key.Value {
		case "key":
			// A key of the wrong type is reported once, not again
			// as missing.
			s, ok := p.str(kv.Value, fpath)
			e.Key, hasKey, keyBad = s, true, !ok
		case "value":
			if s, ok := p.str(kv.Value, fpath); ok {
				e.Value = s
			}
		case "rate_limit":
			if v := p.Follow(kv.Value, fpath); v != nil && !yamlnode.IsNull(v) {
				rateLimit, rateKey = v, kv.Key
			}
		case "shadow_mode":
			// On a descriptor without a limit it has no effect, not
			// even on nested descriptors, as in envoyproxy/ratelimit,
			// which accepts it there.
			shadow, _ = p.boolean(kv.Value, fpath)
		case "unlimited":
			unlimited, _ = p.boolean(kv.Value, fpath)
			unlimitedKey = kv.Key
		case "replaces":
			replacesNode = kv.Value
		case "detailed_metric":
			// It only changes envoyproxy/ratelimit's statistics.
			p.boolean(kv.Value, fpath)
		case "descriptors":
			nested = kv.Value
		default:
			p.unknown(kv.Key, path, descriptorKeys)
		}
	}
	n := &node{}
	var (
		lim           *Limit
		rateReplaces  bool
		replacesNames []string
	)
	trail = append(slices.Clip(trail), e)
	switch {
	case rateLimit != nil && unlimited:
		p.errorf(unlimitedKey, path+".unlimited", "unlimited: true and a rate_limit (line %d) contradict each other; keep one", rateKey.Line)
	case rateLimit != nil:
		lim, rateReplaces = p.rateLimit(rateLimit, rateKey, path+".rate_limit", shadow)
	case unlimited:
		lim = &Limit{Unlimited: true, Shadow: shadow}
	}
	if replacesNode != nil {
		// envoyproxy/ratelimit reads replaces inside rate_limit only;
		// it is accepted beside rate_limit too, and beside unlimited:
		// true, where there is no rate_limit to hold it.
		rpath := path + ".replaces"
		replacesNames = p.replaces(replacesNode, rpath)
		switch {
		case rateLimit == nil && !unlimited:
			p.errorf(replacesNode, rpath, "replaces needs a limit on the same descriptor (rate_limit or unlimited: true)")
		case rateReplaces:
			p.errorf(replacesNode, rpath, "replaces is given here and in rate_limit (line %d); write it once", rateKey.Line)
		case lim != nil:
			lim.Replaces = replacesNames
			p.checkSelf(lim, replacesNode, rpath)
		}
	}
	if nested != nil {
		p.descriptors(nested, path+".descriptors", n, trail)
	}
	if keyBad {
		return Entry{}, nil
	}
	if !hasKey || e.Key == "" {
		if !p.Spent() {
			p.errorf(item, path, "key is missing: every descriptor has a key")
		}
		return Entry{}, nil
	}
	if lim != nil && lim.Rule != nil {
		lim.Rule.Name = ruleName(p.domain, trail)
		if err := lim.Rule.Validate(); err != nil {
			// The checks of rateLimit make this unreachable; it stays
			// so that a change to limit.Rule cannot slip a bad rule
			// past the load.
			p.errorf(rateLimit, path+".rate_limit", "%v", err)
			lim = nil
		}
	}
	n.limit = lim
	return e, n
}

// rateLimit reads a rate_limit block, written at key. It returns a nil
// Limit after a problem, and whether the block holds replaces.
func (p *parser) rateLimit(m, key *yaml.Node, path string, shadow bool) (lim *Limit, hasReplaces bool) {
	if m.Kind != yaml.MappingNode {
		p.errorf(m, path, "want a mapping (unit, requests_per_unit), got %s", yamlnode.Describe(m))
		return nil, false
	}
	lim = &Limit{Shadow: shadow}
	var (
		unitKey, countKey, unlimitedKey *yaml.Node
		replacesKey                     = key
		period                          time.Duration
		count                           int64
		ok                              = true
	)
	for _, kv := range p.Pairs(m, path) {
		fpath := path + "." + kv.Key.Value
		switch kv.Key.Value {
		case "unit":
			unitKey = kv.Key
			s, good := p.str(kv.Value, fpath)
			if !good {
				ok = false
				break
			}
			u, known := units[strings.ToUpper(s)]
			if !known {
				p.errorf(kv.Value, fpath, "unknown unit %q (%s)", s, unitList)
				ok = false
				break
			}
			lim.Unit, period = u.unit, u.period
		case "requests_per_unit":
			countKey = kv.Key
			v, good := p.count(kv.Value, fpath)
			count, ok = v, ok && good
		case "name":
			lim.Name, _ = p.str(kv.Value, fpath)
		case "unlimited":
			unlimitedKey = kv.Key
			lim.Unlimited, _ = p.boolean(kv.Value, fpath)
		case "replaces":
			lim.Replaces = p.replaces(kv.Value, fpath)
			hasReplaces, replacesKey = true, kv.Key
		default:
			p.unknown(kv.Key, path, rateLimitKeys)
		}
	}
	if lim.Unlimited {
		// envoyproxy/ratelimit refuses a unit here and ignores a
		// count; both say the writer expected a limit, so both are
		// refused.
		for _, k := range []*yaml.Node{unitKey, countKey} {
			if k != nil {
				p.errorf(k, path+"."+k.Value, "%s with unlimited: true (line %d); an unlimited descriptor has no rate", k.Value, unlimitedKey.Line)
				ok = false
			}
		}
		lim.Unit, count = rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0
	} else {
		if unitKey == nil {
			p.errorf(key, path, "unit is missing (%s)", unitList)
			ok = false
		}
		if countKey == nil {
			p.errorf(key, path, "requests_per_unit is missing")
			ok = false
		}
	}
	p.checkSelf(lim, replacesKey, path+".replaces")
	if !ok {
		return nil, hasReplaces
	}
	if !lim.Unlimited {
		lim.RequestsPerUnit, lim.Period = uint32(count), period
	}
	// A limit of 0 rejects every request without counting: no Rule.
	if !lim.Unlimited && count > 0 {
		lim.Rule = &limit.Rule{
			Algorithm: limit.FixedWindow,
			Align:     limit.AlignEpoch,
			Rate:      limit.Rate{Count: count, Period: period},
			Shadow:    shadow,
		}
	}
	return lim, hasReplaces
}

// checkSelf refuses a limit that replaces itself, as envoyproxy/ratelimit does.
func (p *parser) checkSelf(lim *Limit, n *yaml.Node, path string) {
	if lim.Name != "" && slices.Contains(lim.Replaces, lim.Name) {
		p.errorf(n, path, "replaces %q: a limit cannot replace itself", lim.Name)
	}
}

// count reads requests_per_unit: a whole number from 0 (reject every
// request, as envoyproxy/ratelimit reads it) to limit.MaxCount.
// envoyproxy/ratelimit reads it as a uint32, up to 4294967295, but every
// limit.Rule is held to limit.MaxCount, which keeps the products of a
// count and a time in microseconds exact in a Lua double. A fixed window
// makes no such product, yet the bound is limit.Rule's: a larger count is
// refused, never lowered.
func (p *parser) count(n *yaml.Node, path string) (int64, bool) {
	n = p.Follow(n, path)
	if n == nil {
		return 0, false
	}
	var v int64
	// Only an !!int: yaml.v3 would truncate 1.5 to 1, and a quoted "10"
	// is a string that happens to hold digits.
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, path, "want a whole number, got %s", yamlnode.Describe(n))
		return 0, false
	}
	switch {
	case v < 0:
		p.errorf(n, path, "%d is negative", v)
		return 0, false
	case v > limit.MaxCount:
		p.errorf(n, path, "%d is above the maximum %d, the largest count of a floodgate limit", v, limit.MaxCount)
		return 0, false
	}
	return v, true
}

// replaces reads a list of {name: NAME}. A name that no limit of the
// domain has is no error: it replaces nothing, as in envoyproxy/ratelimit,
// which accepts it, and a file that names a limit another change removes
// still loads.
func (p *parser) replaces(n *yaml.Node, path string) []string {
	n = p.Follow(n, path)
	if n == nil || yamlnode.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {name: LIMIT_NAME}, got %s", yamlnode.Describe(n))
		return nil
	}
	var names []string
	for i, item := range n.Content {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		item = p.Follow(item, ipath)
		if item == nil {
			continue
		}
		if item.Kind != yaml.MappingNode {
			p.errorf(item, ipath, "want {name: LIMIT_NAME}, got %s", yamlnode.Describe(item))
			continue
		}
		name := ""
		for _, kv := range p.Pairs(item, ipath) {
			if kv.Key.Value != "name" {
				p.unknown(kv.Key, ipath, replacesKeys)
				continue
			}
			name, _ = p.str(kv.Value, ipath+".name")
		}
		if name == "" {
			p.errorf(item, ipath, "a replaces entry needs the name of the limit it replaces")
			continue
		}
		names = append(names, name)
	}
	return names
}

// ruleName names a limit's counters: readable enough to find in the store
// and in metrics, and fixed by the domain and the path of keys and values
// to the descriptor, so that it survives a reload while the rate changes.
// The domain part is cut to keep the name within limit.Rule's 200 bytes;
// the hash keeps cut or folded domains apart.
func ruleName(domain string, trail []Entry) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	write := func(s string) {
		// Length-prefixed, so that no two paths encode alike.
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	write(domain)
	for _, e := range trail {
		write(e.Key)
		write(e.Value)
	}
	var b strings.Builder
	b.WriteString("rls:")
	for i := 0; i < len(domain) && i < 40; i++ {
		c := domain[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			c = '_'
		}
		b.WriteByte(c)
	}
	b.WriteByte(':')
	b.WriteString(hex.EncodeToString(h.Sum(nil))[:16])
	return b.String()
}

// errorf reports a problem with the value at path, naming the path.
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.errs = append(p.errs, &lineError{file: p.file, line: n.Line, msg: msg})
}

func (p *parser) unknown(k *yaml.Node, path string, known []string) {
	msg := fmt.Sprintf("unknown key %q", k.Value)
	if s := yamlnode.Suggest(k.Value, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	} else {
		msg += " (" + strings.Join(known, ", ") + ")"
	}
	p.errorf(k, path, "%s", msg)
}

// str reads a scalar as written. envoyproxy/ratelimit's yaml.v2 does the
// same for its string fields, so value: 123 and value: yes are the strings
// "123" and "yes", as an Envoy descriptor value would be. A null is "".
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	n = p.Follow(n, path)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "want a string, got %s", yamlnode.Describe(n))
		return "", false
	}
	if yamlnode.IsNull(n) {
		return "", true
	}
	return n.Value, true
}

// boolean reads true or false; yes, no, on and off are accepted too, as
// envoyproxy/ratelimit's YAML 1.1 parser accepts them.
func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	n = p.Follow(n, path)
	if n == nil {
		return false, false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!bool" && n.Tag != "!!str") || n.Decode(&b) != nil {
		p.errorf(n, path, "want true or false, got %s", yamlnode.Describe(n))
		return false, false
	}
	return b, true
}
