// Package yamlnode holds what floodgate's two YAML readers share: config,
// which reads the gateway's config file, and rls, which reads
// envoyproxy/ratelimit rule files. Both read yaml.v3 node trees rather than
// decoding through yaml.Unmarshal, so that every problem has a line and so
// that reading goes on after one problem to report the rest.
//
// Parse finds a file's one top-level mapping and the line of a syntax error.
// A Reader walks the tree beneath it: it resolves aliases within a budget,
// so that a few kilobytes of nested aliases cannot expand to billions of
// nodes, refuses an alias that refers to the anchor it sits in, and lists a
// mapping's keys with merge keys (<<) resolved and repeated keys reported.
// Suggest offers the known key closest to a misspelt one.
//
// The words are the callers': each passes in the messages that name its own
// kind of file, and wraps a Problem, or what a Reader reports, in its own
// error type with the file's name.
package yamlnode
