// Package pathclean turns a request's escaped path into the one canonical
// form that floodgate routes match, that the `path` key part holds and that
// the upstream receives.
//
// One path, one spelling. If the gateway matched routes on one spelling of
// a path and the upstream resolved another, a client could slip past a
// route ("/api/./admin" is "/admin" to most servers) or open a fresh counter
// for every spelling of the same resource ("/a", "/a/", "//a", "/%61").
// Clean therefore applies the normalizations of RFC 3986 §6.2.2 that do not
// change what a URI identifies, plus two that floodgate chooses:
//
//   - Percent-encoding normalization (RFC 3986 §2.3, §6.2.2.2): an escaped
//     unreserved character (ALPHA / DIGIT / "-" / "." / "_" / "~") is
//     decoded, because "%41" and "A" are equivalent. Every other escape is
//     kept, since decoding a reserved character can change the meaning of
//     the path (§2.2), and its hex digits are upper-cased (§2.1, §6.2.2.1).
//   - Path segment normalization (RFC 3986 §5.2.4, §6.2.2.3): "." and ".."
//     segments are resolved after decoding, so "%2e%2e" is "..".
//   - Empty segments ("//") are dropped and so is a trailing slash (the root
//     stays "/"): floodgate's choice, so that "/a/" and "//a" are "/a".
//
// Some paths have no safe canonical form and are refused with an error
// wrapping ErrBadPath (the gateway answers 400 bad_request):
//
//   - an encoded slash ("%2F") or backslash ("%5C", or a raw backslash):
//     upstreams disagree on whether it separates segments (many decode it
//     before routing, IIS treats "\" as "/"), so the gateway and the
//     upstream could see different paths; Envoy's
//     path_with_escaped_slashes_action and Apache's AllowEncodedSlashes
//     exist for the same reason;
//   - a NUL, raw or "%00", and any other control byte (below 0x20, or 0x7F):
//     C-based upstreams truncate at a NUL, and no well-formed URI holds a
//     raw control byte (RFC 3986 §2);
//   - ".." above the root: RFC 3986 §5.2.4 would drop it silently, but a
//     client that sends it is probing for a traversal, not naming a
//     resource;
//   - a "." or ".." segment with path parameters (".;x", "..;x"): Tomcat and
//     other servlet containers strip ";params" before resolving dot
//     segments, so "/public/..;/admin" reaches their "/admin" while the
//     gateway would match "/public/..;/admin" — the classic gateway bypass;
//   - a malformed escape ("%", "%4", "%G1") and a path that does not start
//     with "/".
//
// Any other byte that may not appear raw in a path (space, '"', '<', '>',
// '?', '#', '^', '`', '{', '|', '}', bytes from 0x80) is written as its
// escape, the way net/url writes it, so the output is always valid in a
// URL. Paths are case-sensitive (RFC 3986 §6.2.2.1 leaves the path's case
// alone).
//
// Clean runs on every request, so a path that is already clean is returned
// as it is, without allocating; cleaning a dirty path allocates the result
// only.
package pathclean
