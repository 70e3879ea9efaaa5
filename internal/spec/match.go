package spec

import (
	"slices"
	"strings"

	"github.com/floodgate-gw/floodgate/config"
)

// Match is what requests a route takes: its match block.
type Match struct {
	exact   string // the path, when it is matched exactly
	prefix  string // for "/x/**": "/x"; matches /x and everything below it
	methods []string
	host    string
}

// NewMatch is the match of block m.
func NewMatch(m config.Match) Match {
	rm := Match{methods: m.Methods, host: strings.ToLower(m.Host)}
	if p, ok := m.Prefix(); ok {
		rm.prefix = p
		if rm.prefix == "" {
			rm.prefix = "/"
		}
	} else {
		rm.exact = m.Path
	}
	return rm
}

// Takes reports whether the route takes a request; path is cleaned, host
// as HostKey has it. An empty host is taken by a match without one.
func (m *Match) Takes(method, host, path string) bool {
	if m.prefix != "" {
		if !strings.HasPrefix(path, m.prefix) || len(path) > len(m.prefix) && path[len(m.prefix)] != '/' && m.prefix != "/" {
			return false
		}
	} else if path != m.exact {
		return false
	}
	if m.host != "" && host != m.host {
		return false
	}
	return len(m.methods) == 0 || slices.Contains(m.methods, method)
}

// TakesAnyHost is Takes with the match's host left out, for a request
// whose host is not known (a recorded one).
func (m *Match) TakesAnyHost(method, path string) bool { return m.Takes(method, m.host, path) }

// HostKey is the host part of a Host header value: without port or
// brackets, lowercased.
func HostKey(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}
