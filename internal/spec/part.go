package spec

import (
	"net/http"

	"github.com/floodgate-gw/floodgate/config"
)

// Source is where a key part's value comes from (docs/configuration.md,
// Keys).
type Source uint8

const (
	Global Source = iota
	Route
	Path
	Method
	Host
	IP
	Header
	Query
	Cookie
	JWT
	TLS
)

// Part is one part of a limit's key as the configuration names it.
type Part struct {
	Src  Source
	Name string // header (canonical), query, cookie or claim name
	Kind string // the part's kind in the stored key: "ip", "header:x-user-id"
}

// PartOf is the part p names.
func PartOf(p config.KeyPart) Part {
	kp := Part{Kind: p.Kind()}
	switch p.Source {
	case config.SourceGlobal:
		kp.Src = Global
	case config.SourceRoute:
		kp.Src = Route
	case config.SourcePath:
		kp.Src = Path
	case config.SourceMethod:
		kp.Src = Method
	case config.SourceHost:
		kp.Src = Host
	case config.SourceIP:
		kp.Src = IP
	case config.SourceHeader:
		kp.Src, kp.Name = Header, http.CanonicalHeaderKey(p.Name)
	case config.SourceQuery:
		kp.Src, kp.Name = Query, p.Name
	case config.SourceCookie:
		kp.Src, kp.Name = Cookie, p.Name
	case config.SourceJWT:
		kp.Src, kp.Name = JWT, p.Name
	case config.SourceTLS:
		kp.Src, kp.Name = TLS, p.Name
	}
	return kp
}

// UsesIP reports whether parts has the ip part.
func UsesIP(parts []Part) bool {
	for _, p := range parts {
		if p.Src == IP {
			return true
		}
	}
	return false
}
