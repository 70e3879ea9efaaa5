// Package clientip decides which address a request is limited by — the `ip`
// key part — and what X-Forwarded-For the gateway passes upstream.
//
// # Whom to believe
//
// X-Forwarded-For is a list that every proxy extends by appending the
// address it received the request from; anything a client sends arrives in
// it too, so its left end is whatever the client wants (RFC 7239 §8.1: the
// header "cannot be relied upon to be correct"). The only entries a gateway
// can believe are those written by proxies it trusts, and those sit at the
// right end. So:
//
//   - the client is the connection's peer, unless the peer is in a trusted
//     prefix (server.trusted_proxies); a gateway that trusts nobody never
//     reads X-Forwarded-For, so a client cannot choose its limiting address;
//   - behind trusted proxies, the list is walked from the right, skipping
//     trusted proxies; the first untrusted address is the client, because
//     it was written by a trusted proxy that saw it connect;
//   - if every entry is trusted, the left-most is the client (the request
//     came from inside the trusted network);
//   - an empty entry is no entry ("a, , b" and "a, b," list a and b, as
//     RFC 9110 §5.6.1 has recipients read lists);
//   - an entry that does not parse — garbage, "unknown" or an RFC 7239
//     obfuscated identifier such as "_hidden" — ends the walk,
//     and the last good address is used, which may be the peer's. What lies
//     beyond an entry the gateway cannot read is not attributable to a
//     trusted proxy, so the answer errs towards grouping more clients under
//     one proxy's address, never towards an address a client chose.
//
// This is the "right-most untrusted" rule of common practice (MDN's
// X-Forwarded-For page, nginx's real_ip_recursive, Envoy's
// xff_trusted_cidrs). Several header lines are one list, in order
// (RFC 9110 §5.3). Ports, brackets and zones are dropped, and an
// IPv4-mapped IPv6 address (::ffff:192.0.2.1) is the IPv4 address, both
// when matching trusted prefixes and in the result, so a dual-stack
// listener cannot split one client into two.
//
// # Hostile headers
//
// The walk reads the header from the right without splitting it, looks at
// no more than 64 entries and at no entry longer than 128 bytes, and treats
// either limit as an entry that does not parse: an X-Forwarded-For of
// 10,000 entries or of one megabyte costs the same as one of 64, and
// Client never allocates.
//
// # Keys
//
// An IPv4 client is its own key. An IPv6 client is grouped by the prefix
// length ipv6_prefix (64 is usual): one subscriber line or host is given a
// whole /64 (RFC 6177) and can rotate through its 2^64 addresses at will
// (RFC 8981 temporary addresses), so per-address limits would not hold it.
//
// # Passing it on
//
// From a trusted peer the gateway appends the peer to the list, as
// net/http/httputil.ReverseProxy does; from an untrusted peer it replaces
// the list with the client's address alone, so an upstream that reads the
// header never sees a client's forgery.
package clientip
