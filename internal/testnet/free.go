package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address nothing listens on, and that it
// did not give before in this process. The port is free when returned;
// tests write it into a config, because a config with port 0 would not
// tell them where the server ended up.
//
// The port is drawn below the kernel's range of ephemeral ports, from
// which it picks the local port of every outgoing connection and of every
// listener on port 0: a port of that range, free when tested, can be the
// source port of a connection (thousands a second under a load test) or
// another test's listener by the time the server binds it. Below the
// range only a test that chose the same port by the same draw can take
// it: one in thousands, where a port of the range was taken now and then
// in a full run of the tests.
func FreeAddr(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	for range 1000 {
		var addr string
		if low > minPort+1000 {
			addr = fmt.Sprintf("127.0.0.1:%d", minPort+rand.IntN(low-minPort))
		} else {
			addr = "127.0.0.1:0" // a machine whose ephemeral range leaves no room below it
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		addr = l.Addr().String()
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
	t.Fatal("testnet: no free port in 1000 tries")
	return ""
}

// minPort is the lowest port FreeAddr draws: above the ports services
// listen on by convention.
const minPort = 20000

// ephemeralLow is the first port of Linux's ephemeral range; 49152, the
// start of IANA's dynamic ports, where it cannot be read.
var ephemeralLow = sync.OnceValue(func() int {
	var low, high int
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if _, err := fmt.Sscan(string(data), &low, &high); err == nil && low > 0 {
			return low
		}
	}
	return 49152
})

// handedOut holds every address FreeAddr gave.
var handedOut sync.Map
