package clientip_test

import (
	"fmt"
	"net/netip"

	"github.com/floodgate-gw/floodgate/gateway/clientip"
)

// Behind a load balancer in 10.0.0.0/8, the client is the right-most
// address of X-Forwarded-For that is not a trusted proxy; IPv6 clients are
// limited by their /64.
func ExampleResolver_Client() {
	r, err := clientip.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, 64)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, req := range []struct {
		remoteAddr string
		xff        []string
	}{
		{"203.0.113.7:51000", []string{"1.1.1.1"}},                      // not a proxy: its header is ignored
		{"10.0.0.5:51000", []string{"1.1.1.1, 198.51.100.9, 10.0.0.9"}}, // the forged 1.1.1.1 is never reached
		{"10.0.0.5:51000", []string{"[2001:db8:1:2::77]:443"}},
	} {
		ip, peerTrusted := r.Client(req.remoteAddr, req.xff)
		fwd := r.ForwardedFor(clientip.Peer(req.remoteAddr), peerTrusted, req.xff)
		fmt.Printf("client %-18s key %-18s X-Forwarded-For: %s\n", ip, r.Key(ip), fwd)
	}
	// Output:
	// client 203.0.113.7        key 203.0.113.7        X-Forwarded-For: 203.0.113.7
	// client 198.51.100.9       key 198.51.100.9       X-Forwarded-For: 1.1.1.1, 198.51.100.9, 10.0.0.9, 10.0.0.5
	// client 2001:db8:1:2::77   key 2001:db8:1:2::/64  X-Forwarded-For: [2001:db8:1:2::77]:443, 10.0.0.5
}
