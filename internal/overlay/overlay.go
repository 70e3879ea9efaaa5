package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/limit"
)

// Change is what an override changes; nil fields keep the file's value.
// It reads and writes as the JSON of PUT /admin/overrides.
type Change struct {
	// Rate is a rate limit's new rate, as a file writes it ("800/s").
	Rate string `json:"rate,omitempty"`

	// Limit is a concurrency limit's new count of requests in flight.
	Limit int64 `json:"limit,omitempty"`

	// Burst is a token bucket's new size. Without it a new rate brings
	// its own count as the burst when the file's burst is the file rate's
	// count (written so or by default), and keeps the file's otherwise.
	Burst int64 `json:"burst,omitempty"`

	Shadow  *bool `json:"shadow,omitempty"`
	Enabled *bool `json:"enabled,omitempty"`
}

// Request is one override as an operator asks for it.
type Request struct {
	Change

	// TTL ends the override after this long, on every instance; zero:
	// until removed. From MinTTL to MaxTTL.
	TTL time.Duration

	// Reason and By are kept with the override and logged.
	Reason, By string
}

// Bounds of an override.
const (
	MinTTL    = time.Second
	MaxTTL    = 30 * 24 * time.Hour
	maxReason = 200
	maxBy     = 64
)

// maxJSON bounds the JSON of an override read from a shared store.
const maxJSON = 4 << 10

// Override is an override as a set holds it. Its JSON is what a shared
// store keeps, which instances of two versions read during a rolling
// upgrade: its names do not change.
type Override struct {
	Route    string    `json:"route"`
	Limit    string    `json:"limit"`
	Change   Change    `json:"override"`
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"`
	Set      time.Time `json:"set_at"`
	Expires  time.Time `json:"expires_at,omitzero"` // zero: until removed
	Instance string    `json:"instance,omitempty"`  // the instance that set it
}

// Name is the name of the override of a route's limit in a set.
func Name(route, limit string) string { return route + "/" + limit }

// Error is an override refused for one of its fields.
type Error struct {
	Field string // as the JSON names it: rate, burst, ttl…
	Msg   string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// Check checks what does not depend on the limit: that req changes
// something, its counts, its ttl, and its reason and by.
func Check(req Request) error {
	c := req.Change
	switch {
	case c.Rate == "" && c.Limit == 0 && c.Burst == 0 && c.Shadow == nil && c.Enabled == nil:
		return &Error{Field: "override", Msg: "nothing to change: give rate (or limit for concurrency), burst, shadow or enabled"}
	case c.Limit < 0:
		return &Error{Field: "limit", Msg: fmt.Sprintf("%d must be positive", c.Limit)}
	case c.Burst < 0:
		return &Error{Field: "burst", Msg: fmt.Sprintf("%d must be positive", c.Burst)}
	case req.TTL < 0, req.TTL > 0 && req.TTL < MinTTL:
		return &Error{Field: "ttl", Msg: fmt.Sprintf("%v: at least %v", req.TTL, MinTTL)}
	case req.TTL > MaxTTL:
		return &Error{Field: "ttl", Msg: fmt.Sprintf("%v: at most %v (30 days)", req.TTL, MaxTTL)}
	}
	if err := checkText("reason", req.Reason, maxReason); err != nil {
		return err
	}
	return checkText("by", req.By, maxBy)
}

// checkText refuses what would break a log line or a terminal.
func checkText(field, s string, n int) error {
	if len(s) > n {
		return &Error{Field: field, Msg: fmt.Sprintf("%d bytes, at most %d", len(s), n)}
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) {
		return &Error{Field: field, Msg: "holds a control character or invalid UTF-8"}
	}
	return nil
}

// Adjust returns l with c laid over it, its rule and its value overrides'
// rules rebuilt; nil when c disables it. l is not changed. An error is an
// *Error naming the field whose value l cannot take.
func Adjust(l *config.Limit, c Change) (*config.Limit, error) {
	alg := l.Algorithm
	n := *l
	r := freshRule(l.Rule)
	switch {
	case c.Rate != "" && alg == limit.Concurrency:
		return nil, &Error{Field: "rate", Msg: "concurrency takes limit: N (requests in flight), not a rate"}
	case c.Limit != 0 && alg != limit.Concurrency:
		return nil, &Error{Field: "limit", Msg: fmt.Sprintf("limit: N is for concurrency; a %v takes rate (rate: 100/s)", alg)}
	case c.Burst != 0 && alg != limit.TokenBucket:
		return nil, &Error{Field: "burst", Msg: fmt.Sprintf("burst applies to token_bucket only (algorithm is %v)", alg)}
	}
	if c.Rate != "" {
		rate, err := limit.ParseRate(c.Rate)
		if err != nil {
			return nil, &Error{Field: "rate", Msg: strings.TrimPrefix(err.Error(), fmt.Sprintf("rate %q: ", c.Rate))}
		}
		if alg == limit.TokenBucket && c.Burst == 0 && l.Burst == l.Rate.Count {
			n.Burst, r.Burst = rate.Count, rate.Count
		}
		n.Rate, r.Rate = rate, rate
	}
	if c.Limit != 0 {
		n.Rate = limit.Rate{Count: c.Limit}
		n.Limit, r.Rate = c.Limit, n.Rate
	}
	if c.Burst != 0 {
		n.Burst, r.Burst = c.Burst, c.Burst
	}
	if c.Shadow != nil {
		n.Shadow, r.Shadow = *c.Shadow, *c.Shadow
		n.Overrides = make([]*config.Override, len(l.Overrides))
		for i, o := range l.Overrides {
			oc, or := *o, freshRule(o.Rule)
			or.Shadow = *c.Shadow
			if err := or.Validate(); err != nil {
				return nil, &Error{Field: "shadow", Msg: err.Error()}
			}
			oc.Rule = or
			n.Overrides[i] = &oc
		}
	}
	if err := r.Validate(); err != nil {
		field := "rate"
		switch {
		case c.Limit != 0:
			field = "limit"
		case c.Burst != 0 || c.Rate == "":
			field = "burst"
		}
		return nil, &Error{Field: field, Msg: strings.TrimPrefix(err.Error(), "rule "+r.Name+": ")}
	}
	n.Rule = r
	if c.Enabled != nil && !*c.Enabled {
		return nil, nil
	}
	return &n, nil
}

// AdjustProtect returns p with c laid over it: a rate pins the limit
// admitted at that rate, enabled false turns protection off (nil). p is
// not changed.
func AdjustProtect(p *config.Protect, c Change) (*config.Protect, error) {
	switch {
	case c.Limit != 0:
		return nil, &Error{Field: "limit", Msg: "protection takes rate (rate: 300/s), the limit it admits"}
	case c.Burst != 0:
		return nil, &Error{Field: "burst", Msg: "protection has no burst to change; give rate"}
	case c.Shadow != nil:
		return nil, &Error{Field: "shadow", Msg: "protection has no shadow mode; enabled: false turns it off"}
	}
	n := *p
	if c.Rate != "" {
		rate, err := limit.ParseRate(c.Rate)
		if err != nil {
			return nil, &Error{Field: "rate", Msg: strings.TrimPrefix(err.Error(), fmt.Sprintf("rate %q: ", c.Rate))}
		}
		n.Pin = float64(rate.Count) / rate.Period.Seconds()
		if !(n.Pin > 0) || n.Pin > 1e9 {
			return nil, &Error{Field: "rate", Msg: fmt.Sprintf("%s: protection's limit is more than 0 and at most 1e9 a second", c.Rate)}
		}
	}
	if c.Enabled != nil && !*c.Enabled {
		return nil, nil
	}
	return &n, nil
}

// Has says whether cfg has the limit name of route, or, for
// config.ProtectName, the route's protection.
func Has(cfg *config.Config, route, name string) bool {
	return FindLimit(cfg, route, name) != nil || protectOf(cfg, route, name) != nil
}

// protectOf is route's protection, when name is config.ProtectName.
func protectOf(cfg *config.Config, route, name string) *config.Protect {
	if name != config.ProtectName {
		return nil
	}
	for _, r := range cfg.Routes {
		if r.ID == route {
			return r.Protect
		}
	}
	return nil
}

// CheckOn checks c against what it changes in cfg: the limit name of
// route, or its protection. It returns false when cfg has neither.
func CheckOn(cfg *config.Config, route, name string, c Change) (bool, error) {
	if l := FindLimit(cfg, route, name); l != nil {
		_, err := Adjust(l, c)
		return true, err
	}
	if p := protectOf(cfg, route, name); p != nil {
		_, err := AdjustProtect(p, c)
		return true, err
	}
	return false, nil
}

// freshRule copies r's settings into a rule of its own, which derives
// its data again when validated.
func freshRule(r *limit.Rule) *limit.Rule {
	return &limit.Rule{
		Name: r.Name, Algorithm: r.Algorithm, Rate: r.Rate, Burst: r.Burst, Cost: r.Cost,
		Queue: r.Queue, Align: r.Align, Location: r.Location, Shadow: r.Shadow,
		Sliced: r.Sliced, LeaseTTL: r.LeaseTTL,
	}
}

// Apply returns file with set laid over it, and the overrides of set it
// could not apply, by name, with why. file is not changed: what an
// override touches is copied, and a route no override touches is file's
// own. With an empty set, Apply returns file itself.
func Apply(file *config.Config, set map[string]Override) (*config.Config, map[string]string) {
	skipped := map[string]string{}
	if len(set) == 0 {
		return file, skipped
	}
	cfg := *file
	// changed returns ls with the overrides of route laid over it, a new
	// slice when one applies.
	changed := func(ls []*config.Limit, route string) ([]*config.Limit, bool) {
		out := make([]*config.Limit, 0, len(ls))
		touched := false
		for _, l := range ls {
			name := Name(route, l.Name)
			ov, ok := set[name]
			if !ok {
				out = append(out, l)
				continue
			}
			n, err := Adjust(l, ov.Change)
			if err != nil {
				skipped[name] = err.Error()
				out = append(out, l)
				continue
			}
			touched = true
			if n != nil {
				out = append(out, n)
			}
		}
		if !touched {
			return ls, false
		}
		return out, true
	}
	cfg.GlobalLimits, _ = changed(file.GlobalLimits, "global")
	cfg.Routes = make([]*config.Route, len(file.Routes))
	for i, r := range file.Routes {
		cfg.Routes[i] = r
		if ls, ok := changed(r.Limits, r.ID); ok {
			rc := *r
			rc.Limits = ls
			cfg.Routes[i] = &rc
		}
		name := Name(r.ID, config.ProtectName)
		if ov, ok := set[name]; ok && r.Protect != nil {
			p, err := AdjustProtect(r.Protect, ov.Change)
			if err != nil {
				skipped[name] = err.Error()
				continue
			}
			rc := *cfg.Routes[i]
			rc.Protect = p
			cfg.Routes[i] = &rc
		}
	}
	for name, ov := range set {
		if !Has(file, ov.Route, ov.Limit) {
			skipped[name] = fmt.Sprintf("this instance's config has no limit %q on route %q", ov.Limit, ov.Route)
		}
	}
	return &cfg, skipped
}

// WithoutGone splits set into the overrides whose limit file has and
// those of limits it no longer has. A nil set gives nil.
func WithoutGone(file *config.Config, set map[string]Override) (kept map[string]Override, gone []Override) {
	if set == nil {
		return nil, nil
	}
	kept = map[string]Override{}
	for name, ov := range set {
		if !Has(file, ov.Route, ov.Limit) {
			gone = append(gone, ov)
			continue
		}
		kept[name] = ov
	}
	return kept, gone
}

// FindLimit finds a limit of cfg, nil when it has none: route "global"
// names the global limits.
func FindLimit(cfg *config.Config, route, name string) *config.Limit {
	var ls []*config.Limit
	if route == "global" {
		ls = cfg.GlobalLimits
	} else {
		for _, r := range cfg.Routes {
			if r.ID == route {
				ls = r.Limits
			}
		}
	}
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// FileValues are the values of l that c changes, as the file has them.
func FileValues(l *config.Limit, c Change) Change {
	var f Change
	if c.Rate != "" || c.Limit != 0 {
		if l.Algorithm == limit.Concurrency {
			f.Limit = l.Rate.Count
		} else {
			f.Rate = l.Rate.String()
		}
	}
	if l.Algorithm == limit.TokenBucket && (c.Rate != "" || c.Burst != 0) {
		f.Burst = l.Burst
	}
	if c.Shadow != nil {
		f.Shadow = &l.Shadow
	}
	if c.Enabled != nil {
		f.Enabled = new(bool)
		*f.Enabled = true
	}
	return f
}

// LogArgs are the attributes of a log line that say what c changes:
// rate, in_flight, burst, shadow and enabled, each when c changes it.
func (c Change) LogArgs() []any {
	var args []any
	if c.Rate != "" {
		args = append(args, "rate", c.Rate)
	}
	if c.Limit != 0 {
		args = append(args, "in_flight", c.Limit)
	}
	if c.Burst != 0 {
		args = append(args, "burst", c.Burst)
	}
	if c.Shadow != nil {
		args = append(args, "shadow", *c.Shadow)
	}
	if c.Enabled != nil {
		args = append(args, "enabled", *c.Enabled)
	}
	return args
}

// Replaced reads the override that a change of a shared set replaced or
// removed, as the store returns it: nil for none, or for what does not
// read as an override.
func Replaced(b []byte) *Override {
	var ov Override
	if b == nil || json.Unmarshal(b, &ov) != nil {
		return nil
	}
	return &ov
}

// ErrMalformed is wrapped by Decode's errors.
var ErrMalformed = errors.New("malformed override")

// Decode reads the entry name of a shared store's set. Whoever can write
// to the store can write there, so it refuses, wrapping ErrMalformed, an
// entry over maxJSON bytes, one that is not an override's JSON, one whose
// route and limit are not its name's, and one whose change, reason or by
// Check refuses. The entry's Expires is the store's to say.
func Decode(name string, b []byte) (Override, error) {
	var ov Override
	if len(b) > maxJSON {
		return Override{}, fmt.Errorf("%w %q: %d bytes, at most %d", ErrMalformed, name, len(b), maxJSON)
	}
	if err := json.Unmarshal(b, &ov); err != nil {
		return Override{}, fmt.Errorf("%w %q: %v", ErrMalformed, name, err)
	}
	if n := Name(ov.Route, ov.Limit); n != name {
		return Override{}, fmt.Errorf("%w %q: it is of %q", ErrMalformed, name, n)
	}
	if err := Check(Request{Change: ov.Change, Reason: ov.Reason, By: ov.By}); err != nil {
		return Override{}, fmt.Errorf("%w %q: %w", ErrMalformed, name, err)
	}
	return ov, nil
}
