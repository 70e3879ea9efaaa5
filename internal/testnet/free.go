package testnet

import (
	"net"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address nothing listens on, and that it
// did not give before in this process. The port is free when returned;
// tests write it into a config, because a config with port 0 would not
// tell them where the server ended up, and the kernel may hand a port it
// just freed out again: to a test running in parallel, or to the next
// listener of the same one.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// handedOut holds every address FreeAddr gave.
var handedOut sync.Map
