package rls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
	"github.com/floodgate-gw/floodgate/limit"
)

// Parse reads one file's content; name is used in error messages. Every
// problem is reported, one per line of the error's text, each as
// "NAME:LINE: message"; the error is a config.Errors, whose Unwrap() []error
// gives each problem, as errors.Join's does.
func Parse(name string, data []byte) (*Rules, error) {
	f := parseFile(name, data)
	if len(f.errs) > 0 {
		return nil, yamlnode.Sort(f.errs)
	}
	return build([]*file{f}), nil
}

// LoadDir reads every *.yaml and *.yml file directly in dir (not
// subdirectories), sorted by name. Every problem in every file is reported,
// as Parse reports them, each as "FILE:LINE: message" (FILE as the path
// joined from dir), file by file; on any error it returns nil Rules. The
// same domain in two files is an error (at the second file's domain line).
// A missing dir is an error; an empty dir gives empty Rules.
//
// Names starting with a dot are skipped, as a shell's *.yaml skips them:
// editors keep lock and backup files there (Emacs's .#rules.yaml is a
// dangling symlink), and a Kubernetes ConfigMap mount keeps its ..data
// links there. Symlinks to files are followed, so such a mount works.
func LoadDir(dir string) (*Rules, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, yamlnode.Errors{readError(dir, err)}
	}
	var (
		files []*file
		errs  yamlnode.Errors
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
				f.errs = append(f.errs, yamlnode.Error{File: path, Line: f.domainLine,
					Msg: fmt.Sprintf("domain %q is already defined in %s", f.domain, prev)})
			} else {
				first[f.domain] = path
			}
		}
		errs = append(errs, yamlnode.Sort(f.errs)...)
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return build(files), nil
}

func readError(path string, err error) yamlnode.Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return yamlnode.Error{File: path, Msg: "cannot read: " + err.Error()}
}

// A rule file is read in two steps. Decoding fills a ruleFile from the
// YAML, reporting what is not YAML of the right shape: a value of the wrong
// kind, an unknown or repeated key, an alias loop. Checking then validates
// the ruleFile and builds its rule tree, reporting each problem by the path
// of the value at fault, which the decoder's Index places at a line. The
// check sees only Go values, so that a rule file that did not come from
// YAML is held to the same rules.

// ruleFile is a rule file as written: a domain and its descriptors. The
// field order is the order "unknown key" lists the keys in.
type ruleFile struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

// descriptor is one descriptor: envoyproxy/ratelimit's keys, and unlimited
// and replaces beside rate_limit, where a descriptor without a rate_limit
// can hold them.
//
// envoyproxy/ratelimit checks keys against one flat list and silently
// ignores a known key in the wrong place (shadow_mode inside rate_limit);
// here each mapping has its own keys, so that such a mistake is reported
// rather than a limit quietly not applied.
type descriptor struct {
	Key       string     `yaml:"key"`
	Value     string     `yaml:"value"`
	RateLimit *rateLimit `yaml:"rate_limit"`
	// ShadowMode on a descriptor without a limit has no effect, not even
	// on nested descriptors, as in envoyproxy/ratelimit, which accepts it
	// there.
	ShadowMode bool      `yaml:"shadow_mode"`
	Unlimited  bool      `yaml:"unlimited"`
	Replaces   []replace `yaml:"replaces"`
	// DetailedMetric and ValueToMetric only change what the statistics
	// of the limit are named after; they are kept on the Limit.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	// ShareThreshold, on a wildcard value, counts every value it matches
	// under one counter, instead of one counter a value.
	ShareThreshold bool `yaml:"share_threshold"`
	// QuotaMode and Metadata are kept on the Limit; see there.
	QuotaMode   bool         `yaml:"quota_mode"`
	Metadata    metadata     `yaml:"metadata"`
	Descriptors []descriptor `yaml:"descriptors"`
}

// metadata is a descriptor's metadata: a mapping, of any values.
type metadata map[string]any

// decodeMetadata reads a metadata mapping as YAML gives it: envoyproxy/ratelimit
// passes it on to the client without reading it.
func decodeMetadata(d *yamlnode.Decoder, n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, path, "want a mapping, got %s", yamlnode.Describe(n))
		return
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		d.Errorf(n, path, "%v", err)
		return
	}
	v.Set(reflect.ValueOf(metadata(m)))
}

type rateLimit struct {
	Unit string `yaml:"unit"`
	// RequestsPerUnit is nil when left out: 0 is a limit, one that
	// rejects every request.
	RequestsPerUnit *int64    `yaml:"requests_per_unit"`
	Name            string    `yaml:"name"`
	Unlimited       bool      `yaml:"unlimited"`
	Replaces        []replace `yaml:"replaces"`
}

type replace struct {
	Name string `yaml:"name"`
}

// decoderConfig is how a rule file is decoded; each parse sets File.
var decoderConfig = yamlnode.DecoderConfig{
	TooManyNodes: "too many nodes after alias expansion; write the file without nested aliases",
	ListKnown:    true,
	// envoyproxy/ratelimit's yaml.v2 reads a null as the empty string,
	// and reads yes, no, on and off as YAML 1.1 bools; its string
	// fields take any scalar as written, so value: 123 and value: yes
	// are the strings "123" and "yes", as an Envoy descriptor value
	// would be (the decoder's strings do that for all).
	NullIsValue: true,
	YAML11Bools: true,
	Custom: map[reflect.Type]func(*yamlnode.Decoder, *yaml.Node, reflect.Value, string){
		reflect.TypeFor[metadata](): decodeMetadata,
	},
	Kinds: map[reflect.Type]string{
		reflect.TypeFor[[]descriptor](): "a list of descriptors",
		reflect.TypeFor[descriptor]():   "a descriptor (key, value, rate_limit, descriptors)",
		reflect.TypeFor[rateLimit]():    "a mapping (unit, requests_per_unit)",
		reflect.TypeFor[[]replace]():    "a list of {name: LIMIT_NAME}",
		reflect.TypeFor[replace]():      "{name: LIMIT_NAME}",
	},
}

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
	errs       yamlnode.Errors
}

func parseFile(name string, data []byte) *file {
	root, prob := yamlnode.Parse(data, parseMessages)
	if prob != nil {
		return &file{errs: yamlnode.Errors{{File: name, Line: prob.Line, Msg: prob.Msg}}}
	}
	dc := decoderConfig
	dc.File = name
	d := yamlnode.NewDecoder(root, dc)
	var rf ruleFile
	d.Decode(root, &rf, "")
	c := &checker{file: name, at: &d.Index}
	f := &file{domain: rf.Domain}
	// A tree the budget cut short is not checked: what was not read
	// would be reported as missing, or as empty.
	if !d.Spent() {
		f.root = c.check(&rf)
	}
	if f.domain != "" {
		f.domainLine = d.Line("domain")
	}
	f.errs = append(d.Errs, c.errs...)
	return f
}

// checker validates a ruleFile and builds its rule tree.
type checker struct {
	file string
	// at places paths at lines. Nil for a rule file that did not come
	// from YAML: then every problem is at line 0, and a value is given
	// when it is set.
	at     *yamlnode.Index
	domain string
	errs   yamlnode.Errors
}

// errorf reports a problem with the value at path, naming the path.
func (c *checker) errorf(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	c.errs = append(c.errs, yamlnode.Error{File: c.file, Line: c.at.Line(path), Msg: msg})
}

// given reports whether the file gives the value at path; set says whether
// it is set, for a rule file that did not come from YAML.
func (c *checker) given(path string, set bool) bool {
	if c.at == nil {
		return set
	}
	return c.at.Has(path)
}

// missing reports whether a value absent at or below path is to be
// reported as missing: not when decoding reported a problem at path, so
// that a value of the wrong kind is not also missing its parts.
func (c *checker) missing(path string) bool {
	return !c.at.Failed(path)
}

// where names where the value at path is written, for a message that points
// from one value to another: "line 5".
func (c *checker) where(path string) string {
	if l := c.at.Line(path); l > 0 {
		return "line " + strconv.Itoa(l)
	}
	return path
}

// check validates rf and returns its rule tree.
func (c *checker) check(rf *ruleFile) *node {
	switch {
	// A domain of the wrong kind is reported as missing too: the file
	// names no domain.
	case !c.given("domain", rf.Domain != "") || c.at.Failed("domain"):
		c.errorf("", "domain is missing: a rule file names the domain its descriptors belong to")
	case rf.Domain == "":
		c.errorf("domain", "empty domain: a rule file names the domain its descriptors belong to")
	}
	c.domain = rf.Domain
	root := &node{}
	c.descriptors(rf.Descriptors, "descriptors", root, nil)
	return root
}

// descriptors checks a list of descriptors and adds them to parent. path
// names the list; trail holds the descriptors from the top to parent.
func (c *checker) descriptors(list []descriptor, path string, parent *node, trail []Level) {
	first := map[Entry]string{} // → the path of the first
	for i := range list {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		e, n := c.descriptor(&list[i], ipath, trail)
		if n == nil {
			continue
		}
		if fp, dup := first[e]; dup {
			what := fmt.Sprintf("key %q", e.Key)
			if e.Value != "" {
				what += fmt.Sprintf(" value %q", e.Value)
			} else {
				what += " without a value"
			}
			c.errorf(ipath, "%s repeated (first at %s)", what, c.where(fp))
			continue
		}
		first[e] = ipath
		if parent.children == nil {
			parent.children = map[Entry]*node{}
		}
		parent.children[e] = n
		if strings.Contains(e.Value, "*") {
			if parent.wild == nil {
				parent.wild = map[string][]wildcard{}
			}
			parent.wild[e.Key] = append(parent.wild[e.Key], newWildcard(e.Value, n))
		}
	}
}

// descriptor checks one descriptor and what it nests. It returns a nil node
// when the descriptor has no key, so that it is left out of its parent.
func (c *checker) descriptor(d *descriptor, path string, trail []Level) (Entry, *node) {
	e := Entry{Key: d.Key, Value: d.Value}
	var (
		lim          *Limit
		rateReplaces bool
		rpath        = path + ".rate_limit"
	)
	trail = append(slices.Clip(trail), Level{Key: d.Key, Value: d.Value, ShareThreshold: d.ShareThreshold, ValueToMetric: d.ValueToMetric})
	c.modes(d, path)
	switch {
	case d.RateLimit != nil && d.Unlimited:
		c.errorf(path+".unlimited", "unlimited: true and a rate_limit (%s) contradict each other; keep one", c.where(rpath))
	case d.RateLimit != nil:
		lim, rateReplaces = c.rateLimit(d.RateLimit, rpath, d.ShadowMode)
	case d.Unlimited:
		lim = &Limit{Unlimited: true, Shadow: d.ShadowMode}
	}
	if rp := path + ".replaces"; c.given(rp, d.Replaces != nil) {
		// envoyproxy/ratelimit reads replaces inside rate_limit only;
		// it is accepted beside rate_limit too, and beside unlimited:
		// true, where there is no rate_limit to hold it.
		names := c.replaces(d.Replaces, rp)
		switch {
		case d.RateLimit == nil && !d.Unlimited:
			c.errorf(rp, "replaces needs a limit on the same descriptor (rate_limit or unlimited: true)")
		case rateReplaces:
			c.errorf(rp, "replaces is given here and in rate_limit (%s); write it once", c.where(rpath))
		case lim != nil:
			lim.Replaces = names
			c.checkSelf(lim, rp)
		}
	}
	n := &node{}
	c.descriptors(d.Descriptors, path+".descriptors", n, trail)
	if c.at.Failed(path + ".key") {
		// A key of the wrong type is reported once, not again as
		// missing.
		return Entry{}, nil
	}
	if e.Key == "" {
		if c.missing(path) {
			c.errorf(path, "key is missing: every descriptor has a key")
		}
		return Entry{}, nil
	}
	if lim != nil && lim.Rule != nil {
		lim.Rule.Name = ruleName(c.domain, trail)
		lim.QuotaMode = d.QuotaMode
		if err := errors.Join(lim.Rule.Validate(), lim.setQuotaRule()); err != nil {
			// The checks of rateLimit make this unreachable; it stays
			// so that a change to limit.Rule cannot slip a bad rule
			// past the load.
			c.errorf(rpath, "%v", err)
			lim = nil
		}
	}
	if lim != nil {
		lim.Path = trail
		lim.DetailedMetric, lim.QuotaMode, lim.Metadata = d.DetailedMetric, d.QuotaMode, d.Metadata
		for _, l := range trail {
			lim.shared = lim.shared || l.ShareThreshold
		}
		lim.metric, lim.metricNamed = metricOf(lim)
	}
	n.limit = lim
	return e, n
}

// modes checks share_threshold against the value it is written with.
// quota_mode is not checked: envoyproxy/ratelimit loads it with any other
// key, and so does floodgate. With shadow_mode too the limit is a shadow
// limit, which the metadata does not report; on an unlimited descriptor it
// does nothing; both as there.
func (c *checker) modes(d *descriptor, path string) {
	if d.ShareThreshold && !strings.Contains(d.Value, "*") {
		what := fmt.Sprintf("the value %q matches itself only", d.Value)
		if d.Value == "" {
			what = "a descriptor without a value counts each value apart"
		}
		c.errorf(path+".share_threshold", "share_threshold needs a wildcard value (with '*'), whose values then share one counter; %s", what)
	}
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

// rateLimit checks a rate_limit block. It returns a nil Limit after a
// problem, and whether the block holds replaces.
func (c *checker) rateLimit(rl *rateLimit, path string, shadow bool) (lim *Limit, hasReplaces bool) {
	lim = &Limit{Shadow: shadow, Name: rl.Name, Unlimited: rl.Unlimited}
	var (
		upath, cpath = path + ".unit", path + ".requests_per_unit"
		hasUnit      = c.given(upath, rl.Unit != "")
		hasCount     = c.given(cpath, rl.RequestsPerUnit != nil)
		period       time.Duration
		count        int64
		ok           = true
	)
	switch u, known := units[strings.ToUpper(rl.Unit)]; {
	case !hasUnit:
	case c.at.Failed(upath):
		ok = false
	case !known:
		c.errorf(upath, "unknown unit %q (%s)", rl.Unit, unitList)
		ok = false
	default:
		lim.Unit, period = u.unit, u.period
	}
	switch {
	case !hasCount:
	case rl.RequestsPerUnit == nil || c.at.Failed(cpath):
		ok = false
	default:
		count = *rl.RequestsPerUnit
		ok = c.count(count, cpath) && ok
	}
	if rp := path + ".replaces"; c.given(rp, rl.Replaces != nil) {
		lim.Replaces, hasReplaces = c.replaces(rl.Replaces, rp), true
	}
	if lim.Unlimited {
		// envoyproxy/ratelimit refuses a unit here and ignores a
		// count; both say the writer expected a limit, so both are
		// refused.
		for _, k := range []struct {
			name  string
			given bool
		}{{"unit", hasUnit}, {"requests_per_unit", hasCount}} {
			if k.given {
				c.errorf(path+"."+k.name, "%s with unlimited: true (%s); an unlimited descriptor has no rate", k.name, c.where(path+".unlimited"))
				ok = false
			}
		}
		lim.Unit, count = rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0
	} else {
		if !hasUnit {
			if c.missing(path) {
				c.errorf(path, "unit is missing (%s)", unitList)
			}
			ok = false
		}
		if !hasCount {
			if c.missing(path) {
				c.errorf(path, "requests_per_unit is missing")
			}
			ok = false
		}
	}
	c.checkSelf(lim, path+".replaces")
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

// count checks requests_per_unit: a whole number from 0 (reject every
// request, as envoyproxy/ratelimit reads it) to limit.MaxCount.
// envoyproxy/ratelimit reads it as a uint32, up to 4294967295, but every
// limit.Rule is held to limit.MaxCount, which keeps the products of a
// count and a time in microseconds exact in a Lua double. A fixed window
// makes no such product, yet the bound is limit.Rule's: a larger count is
// refused, never lowered.
func (c *checker) count(v int64, path string) bool {
	switch {
	case v < 0:
		c.errorf(path, "%d is negative", v)
		return false
	case v > limit.MaxCount:
		c.errorf(path, "%d is above the maximum %d, the largest count of a floodgate limit", v, limit.MaxCount)
		return false
	}
	return true
}

// checkSelf refuses a limit that replaces itself, as envoyproxy/ratelimit does.
func (c *checker) checkSelf(lim *Limit, path string) {
	if lim.Name != "" && slices.Contains(lim.Replaces, lim.Name) {
		c.errorf(path, "replaces %q: a limit cannot replace itself", lim.Name)
	}
}

// replaces checks a list of {name: NAME} and returns the names. A name that
// no limit of the domain has is no error: it replaces nothing, as in
// envoyproxy/ratelimit, which accepts it, and a file that names a limit
// another change removes still loads.
func (c *checker) replaces(list []replace, path string) []string {
	var names []string
	for i, r := range list {
		if r.Name == "" {
			if ipath := path + "[" + strconv.Itoa(i) + "]"; c.missing(ipath) {
				c.errorf(ipath, "a replaces entry needs the name of the limit it replaces")
			}
			continue
		}
		names = append(names, r.Name)
	}
	return names
}
