package config

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Message is the text of a response code: the message a reject or fallback
// gives for it, else the one in responses, else built-in English for the
// gateway's own codes (docs/configuration.md, responses). A code a reject or fallback uses without
// any message gets the text of rate_limited or service_unavailable. Any
// other code has no message ("").
func (c *Config) Message(code string) string {
	if m, ok := c.messages[code]; ok {
		return m
	}
	return builtinMessages[code]
}

// Summary is the line "floodgate check" prints for a valid config:
//
//	floodgate.yaml: ok: 2 routes, 5 limits, store redis (standalone), admin 127.0.0.1:9090
func (c *Config) Summary() string {
	limits := len(c.GlobalLimits)
	for _, r := range c.Routes {
		limits += len(r.Limits)
	}
	store := string(c.Store.Type)
	if c.Store.Type == StoreRedis {
		store += " (" + string(c.Store.Redis.Mode) + ")"
	}
	admin := c.Admin.Listen
	if admin == "" {
		admin = "off"
	}
	s := fmt.Sprintf("%s: ok: %s, %s, store %s, admin %s",
		c.File, plural(len(c.Routes), "route"), plural(limits, "limit"), store, admin)
	if c.RLS.Listen != "" {
		s += ", rls " + c.RLS.Listen
	}
	if c.Tracing.OTLP != "" {
		s += fmt.Sprintf(", tracing %s (sample %g)", redactURL(c.Tracing.OTLP), c.Tracing.Sample)
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Redacted is the config as GET /admin/config shows it: a value that
// encoding/json marshals to an object with the file's keys, in the file's
// order, holding the running values (defaults included) in the file's
// notation (durations as "10s", rates as "800/s"). Secrets, the Redis
// password and the admin token, whether from the file or from *_env, show as
// "***", and so does the password of any URL.
func (c *Config) Redacted() any {
	return view(reflect.ValueOf(c).Elem(), "")
}

// RedactedWith is Redacted with one more member at the end, key: v.
func (c *Config) RedactedWith(key string, v any) any {
	o, _ := c.Redacted().(object)
	return append(o, member{key, v})
}

// object is a JSON object that keeps its keys in order.
type object []member

type member struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

// view converts a config value for JSON; redact is the field's redact tag.
func view(v reflect.Value, redact string) any {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case limit.Rate:
		if x.Period == 0 {
			return nil // concurrency: the count is in "limit"
		}
		return x.String()
	case limit.Algorithm:
		return x.String()
	case limit.Align:
		if x == limit.AlignFirst {
			return "first"
		}
		return "epoch"
	case *time.Location:
		if x == nil {
			return nil
		}
		return x.String()
	case netip.Prefix:
		return x.String()
	case *url.URL:
		if x == nil {
			return nil
		}
		return redactedURL(x)
	}
	if v.Type().Implements(textMarshalerType) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil
		}
		return string(b)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return view(v.Elem(), redact)
	case reflect.Struct:
		o := object{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			x := view(v.Field(i), f.Tag.Get("redact"))
			// omitempty marks the fields that do not apply to every
			// limit; leaving them out keeps the view a valid config.
			if opts == "omitempty" && (v.Field(i).IsZero() || x == nil) {
				continue
			}
			o = append(o, member{name, x})
		}
		return o
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = view(v.Index(i), redact)
		}
		return out
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		o := object{}
		for _, k := range keys {
			o = append(o, member{k, view(v.MapIndex(reflect.ValueOf(k).Convert(v.Type().Key())), redact)})
		}
		return o
	case reflect.String:
		s := v.String()
		switch {
		case redact == "secret" && s != "":
			return "***"
		case redact == "url":
			return redactURL(s)
		}
		return s
	}
	return v.Interface()
}

// String is the summary line; a Config printed with %v shows no secrets.
func (c *Config) String() string { return c.Summary() }
