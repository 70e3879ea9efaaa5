// Package config reads floodgate's YAML configuration into a typed,
// validated Config.
//
// Loading has one lifecycle, the same for "floodgate serve", a reload and
// the offline "floodgate check":
//
//  1. decode the YAML node tree, rejecting unknown and repeated keys at any
//     depth and values of the wrong type;
//  2. apply the defaults (docs/configuration.md) to what the file left
//     out, and put the values of a command line's flags (ParseWithFlags)
//     in place of the file's;
//  3. validate every field and every relation between fields, building and
//     validating a limit.Rule for each limit and override;
//  4. return an immutable *Config, or every problem found, each with its
//     line, as an Errors value.
//
// Nothing stops at the first problem: a user fixing a config sees all of
// them at once. Nothing is clamped or replaced either: a value that is out of
// range is an error, never a quiet default, because a limit silently made
// looser (or stricter) than written is worse than a refused config.
//
// Parse reads the environment for the variables that password_env and
// token_env name, so that secrets need not sit in the file; their values
// never appear in an error, in Redacted or in Summary.
package config
