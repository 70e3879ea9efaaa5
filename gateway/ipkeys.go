package gateway

import (
	"hash/maphash"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"github.com/floodgate-gw/floodgate/gateway/clientip"
)

// ipKeys keeps the ip key parts (clientip.Resolver.Key) of recent clients,
// so that a client whose requests come again and again, one that an ip
// limit rejects most of all, costs no new string per request. It is a
// table of sets of ipWays addresses, a random one of which a new address
// replaces; it belongs to one generation, whose Resolver made its parts, and
// a generation has one when a limit has the ip part.
type ipKeys struct {
	ips   *clientip.Resolver
	seed  maphash.Seed
	slots []atomic.Pointer[ipKey] // ipSets sets
}

const (
	ipWays = 4
	ipSets = 4096 // 128 KiB of slots, for 16,384 addresses
)

type ipKey struct {
	addr netip.Addr
	key  string
}

func newIPKeys(ips *clientip.Resolver) *ipKeys {
	return &ipKeys{ips: ips, seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[ipKey], ipSets*ipWays)}
}

// key is k.ips.Key(addr).
func (k *ipKeys) key(addr netip.Addr) string {
	if !addr.IsValid() {
		return ""
	}
	b := addr.As16()
	h := maphash.Bytes(k.seed, b[:])
	i := (h % ipSets) * ipWays
	set := k.slots[i : i+ipWays : i+ipWays]
	for j := range set {
		if e := set[j].Load(); e != nil && e.addr == addr {
			return e.key
		}
	}
	e := &ipKey{addr: addr, key: k.ips.Key(addr)}
	for j := range set {
		if set[j].CompareAndSwap(nil, e) {
			return e.key
		}
	}
	set[rand.Uint32()%ipWays].Store(e)
	return e.key
}
