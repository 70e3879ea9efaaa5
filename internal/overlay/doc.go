// Package overlay is the model of a runtime override: a change to one
// running limit that an operator makes without editing the config file,
// and how a set of them is laid over the file's config. The gateway keeps
// the set, shares it with the fleet and applies it (gateway/overrides.go);
// what an override is, what it may change and what a config with a set
// laid over it looks like is decided here, with no gateway, store or clock.
//
// docs/configuration.md, section "Runtime overrides", says what an
// operator sees: the admin API, the precedence over the file, the logs.
//
// # An override
//
// An Override changes one limit, named by its route and its name (route
// "global" for a global limit; Name gives the name of the override in a
// set): its rate and a token bucket's burst, a concurrency limit's count,
// whether it is shadow, or whether it is decided at all (Change). Unset
// fields keep the file's value, so an override holds only what the
// operator asked for, and FileValues says what the file has in its place.
// It wins over the file until it is removed or its ttl ends, across
// reloads.
//
// # Laid over the file
//
// Apply builds the config that runs from the file's and a set: each
// limit an override names is replaced by Adjust's copy of it, or dropped
// when the override disables it. The copy keeps the limit's name, so its
// counters go on, as they do when a reload changes a rate; its rule is a
// new one, built from the file's settings and the override's and
// validated, so that what a rule derives from its settings is derived
// again. A token bucket whose burst was
// its rate's count, as written or by default, takes the new rate's count
// as its burst, so that raising such a limit raises what it lets through
// at once; a burst written apart from the rate is kept. A rate changes the
// limit's own rate, not the rates of its value overrides in the file
// (config.Override: a gold tier keeps its rate); shadow and enabled cover
// them too. The file's config is never changed: the gateway lays the set
// over the same file again whenever the set changes.
//
// An override that one instance cannot apply (its file lacks the limit, or
// the limit cannot take the value) is not an error of the set: Apply
// leaves the limit as the file has it and says why, by name, because with
// a shared store the set is the fleet's, and during a rolling deploy other
// instances may still run a file that has the limit. WithoutGone is for
// the set that is one instance's alone (the memory store), where a reload
// that removes a limit ends its override.
//
// # What is checked, and why
//
// Check refuses, as an *Error naming the JSON field, what does not depend
// on the limit: a request that changes nothing, a negative count, a ttl
// under MinTTL or over MaxTTL, and a reason or by that is too long or
// holds a control character or invalid UTF-8 — they are written to log
// lines and terminals. Adjust refuses what the limit cannot take: a rate
// for a concurrency limit, a count for a rate limit, a burst for anything
// but a token bucket, and any value the limit's rule does not validate
// with, the message being the rule's own. The gateway runs both before a
// change is stored, against its own file, so that an operator learns of
// a bad value from the call rather than from the instances' logs; Apply
// runs Adjust again on each instance's file, which may differ.
//
// Decode reads an override back from a shared store, which anyone who can
// write to Redis can write to: it bounds the entry (4 KiB), and checks
// its name and, with Check, its contents. The JSON names of Override and
// Change are the admin API's and the store's: instances of two versions
// read each other's during a rolling upgrade, so they do not change.
package overlay
