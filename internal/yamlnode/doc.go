// Package yamlnode is floodgate's one YAML reader, for every file format it
// reads: config, the gateway's config file, and rls, envoyproxy/ratelimit
// rule files. It holds what go.yaml.in/yaml/v3 does not give: a line for
// every problem, and reading on after one problem to report the rest.
//
// Parse finds a file's one top-level mapping and the line of a syntax error.
// A Decoder fills tagged Go structs from the tree beneath it, as yaml.v3's
// Decode does, reporting each value of the wrong kind at its line, refusing
// unknown keys with the closest known one as a hint (Suggest), and
// reporting repeated keys. Its Reader resolves aliases within a budget, so
// that a few kilobytes of nested aliases cannot expand to billions of
// nodes, refuses an alias that refers to the anchor it sits in, and
// resolves merge keys (<<).
//
// Decoding leaves an Index: the line of every path the file gives, and the
// paths that did not decode. A validation that sees only the Go values, and
// so may check values that did not come from YAML, reports at the line of
// the value at fault through it.
//
// Error is the FILE:LINE error of every file floodgate reads, config.Error
// to callers, and Sort orders and de-duplicates a file's Errors. The
// words are the callers': each passes in the messages that name its own
// kind of file.
package yamlnode
