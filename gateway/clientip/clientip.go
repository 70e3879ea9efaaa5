package clientip

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

const (
	// maxEntries bounds how many X-Forwarded-For entries Client examines.
	// A real chain of proxies is a handful of hops; anything longer is a
	// client padding the header to make the gateway work.
	maxEntries = 64
	// maxEntryLen bounds the length of one entry, spaces included. The
	// longest address with brackets and a port,
	// "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535", is 53 bytes;
	// the rest is room for a zone and white space.
	maxEntryLen = 128
)

// Resolver finds the client address of requests. Build one per
// configuration with New; it is immutable and safe for concurrent use.
type Resolver struct {
	v4, v6     []netip.Prefix // trusted proxies, masked, IPv4-mapped prefixes as IPv4
	ipv6Prefix int
}

// New returns a Resolver that trusts the proxies in trusted and groups IPv6
// clients by their first ipv6Prefix bits (0 to 128; 128 means no grouping).
// A nil or empty trusted means the gateway trusts nobody and never reads
// X-Forwarded-For. A prefix of IPv4-mapped addresses (::ffff:10.0.0.0/104)
// is read as the IPv4 prefix it maps (10.0.0.0/8), since addresses are
// unmapped before they are matched.
func New(trusted []netip.Prefix, ipv6Prefix int) (*Resolver, error) {
	if ipv6Prefix < 0 || ipv6Prefix > 128 {
		return nil, fmt.Errorf("clientip: ipv6 prefix length %d is not between 0 and 128", ipv6Prefix)
	}
	r := &Resolver{ipv6Prefix: ipv6Prefix}
	for _, p := range trusted {
		if !p.IsValid() {
			return nil, fmt.Errorf("clientip: trusted proxy prefix %q is not valid", p)
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Addr().Is4() {
			r.v4 = append(r.v4, p)
		} else {
			r.v6 = append(r.v6, p)
		}
	}
	return r, nil
}

// Peer returns the address of a connection's peer from
// http.Request.RemoteAddr ("ip:port" or "[ip6]:port"; an address without a
// port is accepted too), unmapped and without its zone. It returns the
// zero Addr when remoteAddr holds no address, as for a Unix socket.
func Peer(remoteAddr string) netip.Addr {
	ip, _ := parseEntry(remoteAddr)
	return ip
}

// Client returns the address that a request is limited by, and whether its
// peer is a trusted proxy. remoteAddr is http.Request.RemoteAddr and xff
// the request's X-Forwarded-For lines (http.Header.Values), read as one
// list in order. The address is the peer's unless the peer is trusted;
// then it is the right-most entry of xff that is not a trusted proxy (see
// the package documentation). The result is unmapped and has no zone; it
// is the zero Addr when remoteAddr holds no address. Client does not
// allocate.
func (r *Resolver) Client(remoteAddr string, xff []string) (ip netip.Addr, peerTrusted bool) {
	peer := Peer(remoteAddr)
	if !peer.IsValid() || !r.trusts(peer) {
		return peer, false
	}
	return r.walk(peer, xff), true
}

// trusts reports whether ip, unmapped, is in a trusted prefix. The lists
// are short (a few load balancer ranges), so a scan beats a trie.
func (r *Resolver) trusts(ip netip.Addr) bool {
	list := r.v6
	if ip.Is4() {
		list = r.v4
	}
	for _, p := range list {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// walk reads xff from the right, one entry at a time, without splitting it:
// each step looks at no more than the last maxEntryLen+1 bytes of what is
// left, so the cost is bounded by maxEntries·maxEntryLen whatever the size
// of the header.
func (r *Resolver) walk(peer netip.Addr, xff []string) netip.Addr {
	last, seen := peer, 0
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for {
			if seen == maxEntries {
				return last
			}
			seen++
			lo := max(0, len(line)-maxEntryLen-1)
			comma := strings.LastIndexByte(line[lo:], ',')
			if comma >= 0 {
				comma += lo
			}
			entry := line[comma+1:]
			if len(entry) > maxEntryLen {
				return last
			}
			if blank(entry) {
				// An empty list element is no element (RFC 9110
				// §5.6.1): "a, , b" and "a,b," list a and b.
				if comma < 0 {
					break
				}
				line = line[:comma]
				continue
			}
			ip, ok := parseEntry(entry)
			if !ok {
				return last
			}
			if !r.trusts(ip) {
				return ip
			}
			last = ip
			if comma < 0 {
				break
			}
			line = line[:comma]
		}
	}
	return last
}

// blank reports whether s holds nothing but spaces and tabs.
func blank(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' && s[i] != '\t' {
			return false
		}
	}
	return true
}

// parseEntry reads one address as proxies write it: "192.0.2.1",
// "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:8080",
// with optional spaces or tabs around it. Brackets are for IPv6 only, as in
// a URI (RFC 3986 §3.2.2). The result is unmapped and has no zone.
func parseEntry(s string) (netip.Addr, bool) {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	// Anything but an address is refused before netip sees it: its errors
	// allocate, and "unknown" or "_hidden" are the usual entries that fail.
	colons, ok := scan(s)
	if !ok {
		return netip.Addr{}, false
	}
	var ip netip.Addr
	var err error
	switch {
	case s[0] == '[' && s[len(s)-1] == ']':
		ip, err = netip.ParseAddr(s[1 : len(s)-1])
		if err == nil && !ip.Is6() {
			return netip.Addr{}, false
		}
	case s[0] == '[' || colons == 1:
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		ip = ap.Addr()
	default:
		ip, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

// scan reports whether s is made of the bytes of an address, a port and
// brackets, and counts its colons; after a '%' (a zone) anything goes, and
// netip decides.
func scan(s string) (colons int, ok bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ':':
			colons++
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F', c == '.', c == '[', c == ']':
		case c == '%':
			return colons + strings.Count(s[i:], ":"), true
		default:
			return 0, false
		}
	}
	return colons, true
}

// Key returns the `ip` key part of a client address: an IPv4 address (an
// IPv4-mapped one unmapped) in dotted form, an IPv6 address masked to the
// Resolver's prefix length in prefix form ("2001:db8:1:2::/64"), or the
// plain IPv6 address when that length is 128. It returns "" for the zero
// Addr, which is a missing key part.
func (r *Resolver) Key(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	var buf [64]byte
	return string(r.AppendKey(buf[:0], ip))
}

// AppendKey appends Key(ip) to dst, for a caller that builds a larger key
// in its own buffer and would rather not allocate the part.
func (r *Resolver) AppendKey(dst []byte, ip netip.Addr) []byte {
	if !ip.IsValid() {
		return dst
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() || r.ipv6Prefix == 128 {
		return ip.AppendTo(dst)
	}
	p, _ := ip.Prefix(r.ipv6Prefix) // cannot fail: ip is valid IPv6 and 0 <= ipv6Prefix <= 128
	dst = p.Addr().AppendTo(dst)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(r.ipv6Prefix), 10)
}

// ForwardedFor returns the X-Forwarded-For value to send upstream. From a
// trusted peer it is the incoming lines joined by ", " with the peer
// appended, as net/http/httputil.ReverseProxy writes it; from an untrusted
// peer — whose client is the peer itself — it is the peer's address alone,
// so that a forged list never reaches the upstream. It returns "" when peer
// is the zero Addr (a Unix socket): the caller then sends no header.
func (r *Resolver) ForwardedFor(peer netip.Addr, peerTrusted bool, xff []string) string {
	if !peer.IsValid() {
		return ""
	}
	var buf [48]byte // enough for any IPv6 address without a zone
	addr := peer.Unmap().WithZone("").AppendTo(buf[:0])
	if !peerTrusted || len(xff) == 0 {
		return string(addr)
	}
	n := len(addr)
	for _, v := range xff {
		n += len(v) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, v := range xff {
		b.WriteString(v)
		b.WriteString(", ")
	}
	b.Write(addr)
	return b.String()
}
