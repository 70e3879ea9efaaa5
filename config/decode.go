package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"
	"github.com/floodgate-gw/floodgate/limit"
)

// newDecoder returns the decoder of a config file's node tree: the shared
// yamlnode.Decoder, told how to read the types of Config. Its Index gives
// validation the line of every path the file gives ("server.listen",
// "routes[0]", "routes[0].limits[1].rate"), from which it also reads
// presence where a zero value alone cannot tell "left out" from "written
// as zero", and the paths whose values could not be decoded, so that it
// does not pile a second, confusing error on the first.
func newDecoder(file string, root *yaml.Node) *yamlnode.Decoder {
	scalars := map[reflect.Type]func(string) (any, error){}
	for _, t := range []reflect.Type{durationType, rateType, algorithmType, alignType, locationType, prefixType, urlType} {
		scalars[t] = func(s string) (any, error) { return parseSpecial(t, s) }
	}
	return yamlnode.NewDecoder(root, yamlnode.DecoderConfig{
		File:         file,
		TooManyNodes: "too many nodes after alias expansion; write the config without nested aliases",
		// A repeated key is reported at its own path, "server.listen:
		// key "listen" repeated", as a value's problems are.
		RepeatedAtKey: true,
		HintSorted:    true,
		EmptyEntry:    "empty list entry",
		Scalars:       scalars,
		Custom: map[reflect.Type]func(*yamlnode.Decoder, *yaml.Node, reflect.Value, string){
			keyValuesType: decodeKeyValues,
		},
		New: func(v reflect.Value) {
			// A block that is there only when the file gives it
			// (server.jwt), and every new element of a list, gets its
			// defaults when it appears.
			if df, ok := v.Addr().Interface().(defaulter); ok {
				df.setDefaults()
			}
		},
	})
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
	keyValuesType = reflect.TypeFor[KeyValues]()
)

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
	// Client addresses are compared unmapped (an IPv4-mapped IPv6 address as its IPv4 address), so an
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

// decodeKeyValues reads a one-part key as a scalar and a composite key as a
// list of scalars.
func decodeKeyValues(d *yamlnode.Decoder, n *yaml.Node, v reflect.Value, path string) {
	kv := v.Addr().Interface().(*KeyValues)
	switch n.Kind {
	case yaml.ScalarNode:
		*kv = KeyValues{n.Value}
	case yaml.SequenceNode:
		vals := make(KeyValues, 0, len(n.Content))
		for i, item := range n.Content {
			s, ok := d.Scalar(item, path+"["+strconv.Itoa(i)+"]", "a value")
			if !ok {
				return
			}
			vals = append(vals, s)
		}
		*kv = vals
	default:
		d.Errorf(n, path, "want a key value or a list of them, got %s", yamlnode.Describe(n))
	}
}
