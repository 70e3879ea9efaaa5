package config

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"

	"github.com/floodgate-gw/floodgate/internal/yamlnode"

	// Time zones load from the binary itself, so a limit's tz works on a
	// minimal container image without /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Load reads and parses the config file at path. On failure the error is an
// Errors value.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// LoadWithFlags reads and parses the config file at path once, with
// flags in place of the values they replace, and returns the digest of
// exactly what was parsed, so that a reload can tell an unchanged file
// from a changed one without a second read racing a writer. Errors are
// Errors, as from Load.
func LoadWithFlags(path string, flags Flags) (*Config, [sha256.Size]byte, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	cfg, err := ParseWithFlags(path, data, flags)
	return cfg, sha256.Sum256(data), err
}

// ReadFile reads the config file at path, for a caller that parses what it
// read itself (ParseWithFlags). On failure the error is an Errors value
// naming the file.
func ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return nil, Errors{yamlnode.WithCause(Error{File: path, Msg: msg}, err)}
	}
	return data, nil
}

// Parse decodes, defaults and validates a config; filename is what errors
// and Summary call it. On failure the error is an Errors value holding every
// problem found, sorted by line.
func Parse(filename string, data []byte) (*Config, error) {
	return ParseWithFlags(filename, data, Flags{})
}

// ParseWithFlags is Parse with the values flags gives in place of the
// file's, each validated as the value it replaces, so that the config it
// returns is the one that runs and has passed the same checks. A problem of
// a flag's value is reported under the flag's name, without a line.
func ParseWithFlags(filename string, data []byte, flags Flags) (*Config, error) {
	root, p := yamlnode.Parse(data, parseMessages)
	if p != nil {
		return nil, Errors{{File: filename, Line: p.Line, Msg: p.Msg}}
	}
	cfg := defaultConfig()
	cfg.File = filename
	d := newDecoder(filename, root)
	d.Decode(root, cfg, "")
	v := &validator{file: filename, lines: d.Lines, bad: d.Bad, lookupEnv: os.LookupEnv}
	v.setFlags(cfg, flags)
	// A tree the budget cut short is not validated: what was not read
	// would be reported as missing.
	if !d.Spent() {
		v.config(cfg)
	}
	errs := append(d.Errs, v.errs...)
	if len(errs) > 0 {
		return nil, yamlnode.Sort(errs)
	}
	cfg.messages, cfg.lines = v.messages, d.Lines
	cfg.Warnings = yamlnode.Sort(v.warns)
	return cfg, nil
}

// parseMessages are what Parse says of a file that is not one mapping.
var parseMessages = yamlnode.ParseMessages{
	Empty:          "empty config",
	SecondDocument: "a config file holds one YAML document; remove the second (---)",
	NotMapping:     "the config must be a mapping of keys (server, routes, ...)",
}
