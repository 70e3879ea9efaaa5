package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

func mustNew(t testing.TB, trusted []netip.Prefix, ipv6Prefix int) *Resolver {
	t.Helper()
	r, err := New(trusted, ipv6Prefix)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The trusted proxies of most tests: a private range, one load balancer and
// an IPv6 range.
var trusted = prefixes("10.0.0.0/8", "192.0.2.1/32", "2001:db8:ffff::/48")

func TestClient(t *testing.T) {
	many := strings.Repeat("10.1.1.1, ", 9999) + "10.1.1.1"
	tests := []struct {
		name        string
		trusted     []netip.Prefix
		remote      string
		xff         []string
		want        string // "" is the zero Addr
		peerTrusted bool
	}{
		{name: "no proxy", remote: "203.0.113.7:5555", want: "203.0.113.7"},
		{name: "trusts nobody, spoofed XFF", remote: "203.0.113.7:5555", xff: []string{"1.1.1.1"}, want: "203.0.113.7"},
		{name: "trusts nobody, spoofed XFF from a would-be proxy", remote: "10.0.0.5:5555", xff: []string{"10.0.0.1, 1.1.1.1"}, want: "10.0.0.5"},
		{name: "untrusted peer, spoofed XFF", trusted: trusted, remote: "203.0.113.7:5555", xff: []string{"1.1.1.1"}, want: "203.0.113.7"},
		{name: "trusted peer, no XFF", trusted: trusted, remote: "10.0.0.5:5555", want: "10.0.0.5", peerTrusted: true},
		{name: "trusted peer, one hop", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9"}, want: "198.51.100.9", peerTrusted: true},
		{
			name: "several trusted hops, right-most untrusted", trusted: trusted, remote: "10.0.0.5:5555",
			xff:  []string{"1.1.1.1, 198.51.100.9, 192.0.2.1, 10.9.9.9, 2001:db8:ffff::1"},
			want: "198.51.100.9", peerTrusted: true,
		},
		{name: "all trusted: left-most", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"10.3.3.3, 192.0.2.1, 10.2.2.2"}, want: "10.3.3.3", peerTrusted: true},
		{name: "garbage in the middle: last good", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, garbage, 10.2.2.2"}, want: "10.2.2.2", peerTrusted: true},
		{name: "garbage right-most: the peer", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, nope"}, want: "10.0.0.5", peerTrusted: true},
		{name: "garbage left of the client does not matter", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"nope, 198.51.100.9, 10.2.2.2"}, want: "198.51.100.9", peerTrusted: true},
		{name: "an empty entry is no entry", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, , 10.2.2.2"}, want: "198.51.100.9", peerTrusted: true},
		{name: "trailing comma", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9,"}, want: "198.51.100.9", peerTrusted: true},
		{name: "trailing comma and space", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9,10.2.2.2 , "}, want: "198.51.100.9", peerTrusted: true},
		{name: "empty header line", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9", ""}, want: "198.51.100.9", peerTrusted: true},
		{name: "nothing but commas", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{", ,,"}, want: "10.0.0.5", peerTrusted: true},
		{name: "unknown", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, unknown, 10.2.2.2"}, want: "10.2.2.2", peerTrusted: true},
		{name: "obfuscated identifier", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"_hidden"}, want: "10.0.0.5", peerTrusted: true},
		{name: "leading zeros are not an address", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.051.100.9"}, want: "10.0.0.5", peerTrusted: true},
		{name: "IPv4 with port", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9:4711, 10.2.2.2:80"}, want: "198.51.100.9", peerTrusted: true},
		{name: "bad port", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9:99999"}, want: "10.0.0.5", peerTrusted: true},
		{name: "IPv6 bracketed with port", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"[2001:db8::7]:443"}, want: "2001:db8::7", peerTrusted: true},
		{name: "IPv6 bracketed", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"[2001:db8::7]"}, want: "2001:db8::7", peerTrusted: true},
		{name: "IPv6 bare", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"2001:DB8::7"}, want: "2001:db8::7", peerTrusted: true},
		{name: "IPv6 with zone", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"fe80::1%eth0"}, want: "fe80::1", peerTrusted: true},
		{name: "brackets are for IPv6 only", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"[198.51.100.9]"}, want: "10.0.0.5", peerTrusted: true},
		{name: "unclosed bracket", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"[2001:db8::7"}, want: "10.0.0.5", peerTrusted: true},
		{name: "spaces and tabs", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{" \t198.51.100.9\t ,\t10.2.2.2 "}, want: "198.51.100.9", peerTrusted: true},
		{name: "IPv6 peer", trusted: trusted, remote: "[2001:db8:ffff::2]:5555", xff: []string{"198.51.100.9"}, want: "198.51.100.9", peerTrusted: true},
		{name: "IPv4-mapped peer is trusted as IPv4", trusted: trusted, remote: "[::ffff:10.0.0.5]:5555", xff: []string{"198.51.100.9"}, want: "198.51.100.9", peerTrusted: true},
		{name: "IPv4-mapped untrusted peer is unmapped", trusted: trusted, remote: "[::ffff:203.0.113.7]:5555", want: "203.0.113.7"},
		{name: "IPv4-mapped entries", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"::ffff:198.51.100.9, [::ffff:10.2.2.2]:80"}, want: "198.51.100.9", peerTrusted: true},
		{name: "IPv4-mapped trusted prefix", trusted: prefixes("::ffff:10.0.0.0/104"), remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, 10.2.2.2"}, want: "198.51.100.9", peerTrusted: true},
		{
			name: "several header lines are one list", trusted: trusted, remote: "10.0.0.5:5555",
			xff:  []string{"1.1.1.1, 198.51.100.9", "10.2.2.2", "192.0.2.1, 10.3.3.3"},
			want: "198.51.100.9", peerTrusted: true,
		},
		{name: "several header lines, all trusted", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"10.1.1.1", "10.2.2.2"}, want: "10.1.1.1", peerTrusted: true},
		{
			name: "10,000 trusted entries: the 64th from the right", trusted: trusted, remote: "10.0.0.5:5555",
			xff:  []string{strings.Repeat("1.1.1.1, ", 9936) + "10.0.0.64, " + strings.Repeat("10.1.1.1, ", 62) + "10.1.1.1"},
			want: "10.0.0.64", peerTrusted: true,
		},
		{name: "10,000 trusted entries", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{many}, want: "10.1.1.1", peerTrusted: true},
		{name: "10,000 header lines", trusted: trusted, remote: "10.0.0.5:5555", xff: strings.Split(many, ", "), want: "10.1.1.1", peerTrusted: true},
		{name: "a 1 MB entry", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{"198.51.100.9, " + strings.Repeat("1", 1<<20)}, want: "10.0.0.5", peerTrusted: true},
		{name: "1 MB of spaces around an address", trusted: trusted, remote: "10.0.0.5:5555", xff: []string{strings.Repeat(" ", 1<<20) + "198.51.100.9"}, want: "10.0.0.5", peerTrusted: true},
		{name: "Unix socket", trusted: trusted, remote: "@", xff: []string{"198.51.100.9"}, want: ""},
		{name: "empty remote", trusted: trusted, remote: "", want: ""},
		{name: "remote without port", trusted: trusted, remote: "10.0.0.5", xff: []string{"198.51.100.9"}, want: "198.51.100.9", peerTrusted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.trusted, 64)
			ip, peerTrusted := r.Client(tt.remote, tt.xff)
			want := netip.Addr{}
			if tt.want != "" {
				want = netip.MustParseAddr(tt.want)
			}
			if ip != want || peerTrusted != tt.peerTrusted {
				t.Errorf("Client(%q, %.80q) = %v, %v; want %v, %v", tt.remote, tt.xff, ip, peerTrusted, want, tt.peerTrusted)
			}
		})
	}
}

// Neither a long header nor a hostile one makes Client allocate, and a
// megabyte costs no more than 64 entries.
func TestClientDoesNotAllocate(t *testing.T) {
	r := mustNew(t, trusted, 64)
	for name, xff := range map[string][]string{
		"3 hops":         {"198.51.100.9, 10.2.2.2", "192.0.2.1"},
		"10,000 hops":    {strings.Repeat("10.1.1.1, ", 9999) + "10.1.1.1"},
		"1 MB":           {strings.Repeat("x", 1<<20)},
		"garbage":        {"198.51.100.9, unknown, 10.2.2.2"},
		"IPv6 and ports": {"[2001:db8::1]:80, [2001:db8:ffff::1]:443"},
	} {
		if n := testing.AllocsPerRun(100, func() { r.Client("10.0.0.5:5555", xff) }); n != 0 {
			t.Errorf("%s: Client allocated %v times; want 0", name, n)
		}
	}
}

func TestNew(t *testing.T) {
	for _, bits := range []int{-1, 129} {
		if _, err := New(nil, bits); err == nil {
			t.Errorf("New(nil, %d) succeeded; want an error", bits)
		}
	}
	if _, err := New([]netip.Prefix{{}}, 64); err == nil {
		t.Error("New with an invalid prefix succeeded; want an error")
	}
	// An unmasked prefix is masked.
	r := mustNew(t, prefixes("10.1.2.3/8"), 64)
	if ip, ok := r.Client("10.200.0.1:1", []string{"198.51.100.9"}); !ok || ip != netip.MustParseAddr("198.51.100.9") {
		t.Errorf("Client behind 10.1.2.3/8 = %v, %v", ip, ok)
	}
}

func TestKey(t *testing.T) {
	tests := []struct {
		bits     int
		ip, want string
	}{
		{64, "198.51.100.9", "198.51.100.9"},
		{64, "::ffff:198.51.100.9", "198.51.100.9"},
		{64, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{64, "2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{64, "2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{64, "fe80::1%eth0", "fe80::/64"},
		{48, "2001:db8:1:2::1", "2001:db8:1::/48"},
		{56, "2001:db8:1:2ff::1", "2001:db8:1:200::/56"},
		{128, "2001:db8:1:2::1", "2001:db8:1:2::1"},
		{0, "2001:db8:1:2::1", "::/0"},
		{0, "198.51.100.9", "198.51.100.9"},
	}
	for _, tt := range tests {
		r := mustNew(t, nil, tt.bits)
		if got := r.Key(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("Key(%s) with /%d = %q; want %q", tt.ip, tt.bits, got, tt.want)
		}
	}
	if got := mustNew(t, nil, 64).Key(netip.Addr{}); got != "" {
		t.Errorf("Key(zero Addr) = %q; want \"\"", got)
	}
	r := mustNew(t, nil, 64)
	ip := netip.MustParseAddr("2001:db8:1:2::1")
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendKey(buf[:0], ip) }); n != 0 {
		t.Errorf("AppendKey allocated %v times; want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.Key(ip) }); n > 1 {
		t.Errorf("Key allocated %v times; want at most 1", n)
	}
}

func TestForwardedFor(t *testing.T) {
	r := mustNew(t, trusted, 64)
	tests := []struct {
		name        string
		peer        string
		peerTrusted bool
		xff         []string
		want        string
	}{
		{name: "untrusted peer replaces", peer: "203.0.113.7", xff: []string{"1.1.1.1, 2.2.2.2"}, want: "203.0.113.7"},
		{name: "untrusted peer, no XFF", peer: "203.0.113.7", want: "203.0.113.7"},
		{name: "untrusted IPv6 peer", peer: "2001:db8::7", want: "2001:db8::7"},
		{name: "untrusted IPv4-mapped peer", peer: "::ffff:203.0.113.7", want: "203.0.113.7"},
		{name: "trusted peer appends", peer: "10.0.0.5", peerTrusted: true, xff: []string{"198.51.100.9"}, want: "198.51.100.9, 10.0.0.5"},
		{name: "trusted peer joins lines", peer: "10.0.0.5", peerTrusted: true, xff: []string{"1.1.1.1, 198.51.100.9", "10.2.2.2"}, want: "1.1.1.1, 198.51.100.9, 10.2.2.2, 10.0.0.5"},
		{name: "trusted peer keeps what it cannot read", peer: "10.0.0.5", peerTrusted: true, xff: []string{"unknown,  _x "}, want: "unknown,  _x , 10.0.0.5"},
		{name: "trusted peer, no XFF", peer: "10.0.0.5", peerTrusted: true, want: "10.0.0.5"},
		{name: "trusted IPv6 peer", peer: "2001:db8:ffff::2", peerTrusted: true, xff: []string{"198.51.100.9"}, want: "198.51.100.9, 2001:db8:ffff::2"},
	}
	for _, tt := range tests {
		if got := r.ForwardedFor(netip.MustParseAddr(tt.peer), tt.peerTrusted, tt.xff); got != tt.want {
			t.Errorf("%s: ForwardedFor(%s, %v, %q) = %q; want %q", tt.name, tt.peer, tt.peerTrusted, tt.xff, got, tt.want)
		}
	}
	if got := r.ForwardedFor(netip.Addr{}, false, []string{"1.1.1.1"}); got != "" {
		t.Errorf("ForwardedFor(zero Addr) = %q; want \"\"", got)
	}
}

// A chain of gateways that trust each other agrees on the client: what one
// passes upstream with ForwardedFor, the next reads back with Client.
func TestForwardedForRoundTrip(t *testing.T) {
	first := mustNew(t, trusted, 64)
	next := mustNew(t, append(prefixes("172.16.0.1/32"), trusted...), 64) // trusts the first gateway too
	for _, c := range []struct {
		remote string
		xff    []string
	}{
		{"203.0.113.7:1", []string{"1.1.1.1"}},
		{"10.0.0.5:1", []string{"1.1.1.1, 198.51.100.9", "10.2.2.2"}},
		{"10.0.0.5:1", []string{"10.1.1.1"}},
		{"10.0.0.5:1", []string{"198.51.100.9, garbage, 10.2.2.2"}},
		{"10.0.0.5:1", nil},
	} {
		client, peerTrusted := first.Client(c.remote, c.xff)
		fwd := first.ForwardedFor(Peer(c.remote), peerTrusted, c.xff)
		again, _ := next.Client("172.16.0.1:1", []string{fwd})
		if again != client {
			t.Errorf("Client(%q, %q) = %v, but the next gateway reads %q as %v", c.remote, c.xff, client, fwd, again)
		}
	}
}

// referenceClient is the rule of the package doc written the obvious way:
// split everything, then walk. FuzzClient checks Client against it.
func referenceClient(trusted []netip.Prefix, remote string, xff []string) (netip.Addr, bool) {
	parse := func(s string) (netip.Addr, bool) {
		s = strings.Trim(s, " \t")
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone(""), true
		}
		if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
			if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
				return a.Unmap().WithZone(""), true
			}
			return netip.Addr{}, false
		}
		if a, err := netip.ParseAddr(s); err == nil {
			return a.Unmap().WithZone(""), true
		}
		return netip.Addr{}, false
	}
	trusts := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	peer, _ := parse(remote)
	if !peer.IsValid() || !trusts(peer) {
		return peer, false
	}
	entries := strings.Split(strings.Join(xff, ","), ",")
	if len(xff) == 0 {
		entries = nil
	}
	last := peer
	for i, n := len(entries)-1, 0; i >= 0; i, n = i-1, n+1 {
		if n == maxEntries || len(entries[i]) > maxEntryLen {
			return last, true
		}
		a, ok := parse(entries[i])
		if !ok {
			return last, true
		}
		if !trusts(a) {
			return a, true
		}
		last = a
	}
	return last, true
}

func FuzzClient(f *testing.F) {
	f.Add("10.0.0.5:5555", "1.1.1.1, 198.51.100.9, 192.0.2.1, 10.9.9.9", true)
	f.Add("10.0.0.5:5555", "198.51.100.9, garbage\n10.2.2.2", true)
	f.Add("[::ffff:10.0.0.5]:1", "[2001:db8::7]:443,::ffff:1.2.3.4:80", true)
	f.Add("203.0.113.7:5555", "10.0.0.1", true)
	f.Add("10.0.0.5:5555", "10.0.0.1, 10.0.0.2", false)
	f.Add("10.0.0.5:5555", " , ,unknown,_hidden,[fe80::1%eth0]:1", true)
	f.Fuzz(func(t *testing.T, remote, header string, trustSome bool) {
		var tp []netip.Prefix
		if trustSome {
			tp = trusted
		}
		r := mustNew(t, tp, 64)
		var xff []string
		if header != "" {
			xff = strings.Split(header, "\n") // several header lines
		}
		ip, peerTrusted := r.Client(remote, xff)
		peer := Peer(remote)
		if !trustSome && (ip != peer || peerTrusted) {
			t.Fatalf("trusting nobody, Client(%q, %q) = %v, %v; want the peer %v", remote, xff, ip, peerTrusted, peer)
		}
		if ip.IsValid() && (ip.Is4In6() || ip.Zone() != "") {
			t.Fatalf("Client(%q, %q) = %v: mapped or zoned", remote, xff, ip)
		}
		if ip != peer && !strings.Contains(strings.ToLower(header), strings.Split(ip.String(), ":")[0]) {
			// Not the peer: the address must come from the header. (Its
			// first group or octet is enough to tell it is not invented.)
			t.Fatalf("Client(%q, %q) = %v: neither the peer nor in the header", remote, xff, ip)
		}
		if want, wantTrusted := referenceClient(tp, remote, xff); ip != want || peerTrusted != wantTrusted {
			t.Fatalf("Client(%q, %q) = %v, %v; the plain reading of the rule gives %v, %v", remote, xff, ip, peerTrusted, want, wantTrusted)
		}
	})
}

func FuzzForwardedFor(f *testing.F) {
	f.Add("10.0.0.5", "1.1.1.1, 198.51.100.9", true)
	f.Add("2001:db8::1%eth0", "a\nb", true)
	f.Add("::ffff:1.2.3.4", "", false)
	f.Fuzz(func(t *testing.T, peerText, header string, peerTrusted bool) {
		r := mustNew(t, trusted, 64)
		peer, err := netip.ParseAddr(peerText)
		if err != nil {
			peer = netip.Addr{}
		}
		var xff []string
		if header != "" {
			xff = strings.Split(header, "\n")
		}
		got := r.ForwardedFor(peer, peerTrusted, xff)
		if !peer.IsValid() {
			if got != "" {
				t.Fatalf("ForwardedFor(zero Addr) = %q", got)
			}
			return
		}
		addr := peer.Unmap().WithZone("").String()
		switch {
		case !peerTrusted || len(xff) == 0:
			if got != addr {
				t.Fatalf("ForwardedFor(%v, %v, %q) = %q; want the peer alone", peer, peerTrusted, xff, got)
			}
		case got != strings.Join(xff, ", ")+", "+addr:
			t.Fatalf("ForwardedFor(%v, true, %q) = %q; want the lines and the peer", peer, xff, got)
		}
		// What the upstream reads back names the peer last.
		if a, ok := parseEntry(got[strings.LastIndexByte(got, ',')+1:]); !ok || a != peer.Unmap().WithZone("") {
			t.Fatalf("ForwardedFor(%v, %v, %q) = %q: does not end with the peer", peer, peerTrusted, xff, got)
		}
	})
}

func BenchmarkClient(b *testing.B) {
	for _, bm := range []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string
	}{
		{"no-proxy", nil, "203.0.113.7:5555", nil},
		{"no-proxy-spoofed", nil, "203.0.113.7:5555", []string{"1.1.1.1"}},
		{"trusted-3-hops", trusted, "10.0.0.5:5555", []string{"198.51.100.9, 192.0.2.1, 10.2.2.2"}},
		{"trusted-ipv6", trusted, "[2001:db8:ffff::2]:5555", []string{"[2001:db8:1:2::1]:443, 2001:db8:ffff::1"}},
		{"trusted-10000-entries", trusted, "10.0.0.5:5555", []string{strings.Repeat("10.1.1.1, ", 9999) + "10.1.1.1"}},
	} {
		r := mustNew(b, bm.trusted, 64)
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Client(bm.remote, bm.xff)
			}
		})
	}
}

func BenchmarkKey(b *testing.B) {
	r := mustNew(b, nil, 64)
	for _, s := range []string{"198.51.100.9", "2001:db8:1:2::1"} {
		ip := netip.MustParseAddr(s)
		name := "v4"
		if ip.Is6() {
			name = "v6"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Key(ip)
			}
		})
		b.Run(name+"-append", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			for b.Loop() {
				buf = r.AppendKey(buf[:0], ip)
			}
		})
	}
}

func BenchmarkForwardedFor(b *testing.B) {
	r := mustNew(b, trusted, 64)
	peer := netip.MustParseAddr("10.0.0.5")
	for _, bm := range []struct {
		name    string
		trusted bool
		xff     []string
	}{
		{"untrusted", false, []string{"1.1.1.1"}},
		{"trusted-3-hops", true, []string{"198.51.100.9, 192.0.2.1", "10.2.2.2"}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.ForwardedFor(peer, bm.trusted, bm.xff)
			}
		})
	}
}
