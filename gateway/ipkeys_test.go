package gateway

import (
	"net/netip"
	"testing"

	"github.com/floodgate-gw/floodgate/gateway/clientip"
)

func TestIPKeys(t *testing.T) {
	ips, err := clientip.New(nil, 64)
	if err != nil {
		t.Fatal(err)
	}
	k := newIPKeys(ips)
	addrs := []netip.Addr{{}, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.1"),
		netip.MustParseAddr("2001:db8:1:2::5"), netip.MustParseAddr("2001:db8:1:2::6"), netip.MustParseAddr("fe80::1%eth0")}
	for i := range 20000 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	for range 2 {
		for _, a := range addrs {
			if got, want := k.key(a), ips.Key(a); got != want {
				t.Fatalf("key(%v) = %q, want %q", a, got, want)
			}
		}
	}
	a := netip.MustParseAddr("2001:db8:1:2::5")
	k.key(a)
	if n := testing.AllocsPerRun(100, func() { k.key(a) }); n != 0 {
		t.Fatalf("the key of a known address made %v allocations", n)
	}
}
