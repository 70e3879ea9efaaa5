package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// A versioned set is a small map that the instances sharing a store keep
// alike: the gateway's runtime overrides. It lives in one hash under the
// prefix, PREFIX + kind, and every change makes a new version of the
// whole, announced on the channel PREFIX + kind. A store that missed an
// announcement (it was not subscribed, Redis restarted) learns of the
// change by asking for the version (SetVersion), which is one small
// command.

//go:embed versioned.lua
var versionedSource string

var versionedScript = rueidis.NewLuaScript(versionedSource)

// Bounds of a versioned set: far more entries than an operator sets, and
// entries far larger than floodgate's own.
const (
	MaxEntries    = 1000
	MaxEntryBytes = 4 << 10
)

// ErrFull is returned by Put when the set holds MaxEntries entries.
var ErrFull = errors.New("redisstore: the set is full")

// A Set is a versioned set as Redis held it after a change or a read.
type Set struct {
	// Epoch names the set's life: a set that Redis lost (flushed,
	// restarted without persistence) and that a later change made again
	// has another, and its versions count from 1 again.
	Epoch string

	// Version counts the changes of this epoch; 0: none yet.
	Version int64

	// Entries are the entries alive, by name.
	Entries map[string]Entry

	// Skipped counts the entries left out because they are not what Put
	// writes or are larger than MaxEntryBytes.
	Skipped int
}

// An Entry is one value of a set.
type Entry struct {
	Value   []byte
	Expires time.Time // by the Redis clock; zero: never
}

func (s *Store) setKey(kind string) string { return "{" + s.prefix + kind + "}:set" }

// Put sets the entry name of the set kind to value, for ttl when it is
// positive (then it is gone for every reader), makes a new version and
// announces it. It returns the set after the change. An error wrapping
// limit.ErrStoreUnavailable means Redis did not answer, and whether the
// change was made is unknown; any other error means it was not.
func (s *Store) Put(ctx context.Context, kind, name string, value []byte, ttl time.Duration) (Set, error) {
	if len(name)+len(value) > MaxEntryBytes {
		return Set{}, fmt.Errorf("redisstore: entry of %d bytes, over %d", len(name)+len(value), MaxEntryBytes)
	}
	set, _, err := s.change(ctx, kind, "put", name, value, ttl)
	return set, err
}

// Delete removes the entry name of the set kind. changed is false when
// there was none, and then no version is made.
func (s *Store) Delete(ctx context.Context, kind, name string) (set Set, changed bool, err error) {
	return s.change(ctx, kind, "del", name, nil, 0)
}

func (s *Store) change(ctx context.Context, kind, op, name string, value []byte, ttl time.Duration) (Set, bool, error) {
	if err := checkKind(kind); err != nil {
		return Set{}, false, err
	}
	if name == "" {
		return Set{}, false, errors.New("redisstore: an entry needs a name")
	}
	c, err := s.get(op)
	if err != nil {
		return Set{}, false, err
	}
	var e [8]byte
	rand.Read(e[:])
	ms := int64(0)
	if ttl > 0 {
		ms = max(ttl.Milliseconds(), 1)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	vs, err := versionedScript.Exec(ctx, c, []string{s.setKey(kind)}, []string{
		op, name, string(value), strconv.FormatInt(ms, 10), hex.EncodeToString(e[:]),
		s.prefix + kind, strconv.Itoa(MaxEntries),
	}).ToArray()
	if err != nil {
		if strings.HasPrefix(err.Error(), "FULL ") {
			return Set{}, false, fmt.Errorf("%w: %s", ErrFull, strings.TrimPrefix(err.Error(), "FULL "))
		}
		return Set{}, false, unavailable(op, err)
	}
	if len(vs) < 1 {
		return Set{}, false, unavailable(op, fmt.Errorf("answer of %d values", len(vs)))
	}
	changed, err := vs[0].AsInt64()
	if err != nil {
		return Set{}, false, unavailable(op, err)
	}
	set, err := parseSet(vs[1:])
	if err != nil {
		return Set{}, false, unavailable(op, err)
	}
	return set, changed == 1, nil
}

// Read returns the set kind as Redis holds it: empty, with version 0,
// when there is none.
func (s *Store) Read(ctx context.Context, kind string) (Set, error) {
	if err := checkKind(kind); err != nil {
		return Set{}, err
	}
	c, err := s.get("read")
	if err != nil {
		return Set{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	m, err := c.Do(ctx, c.B().Hgetall().Key(s.setKey(kind)).Build()).AsStrMap()
	if err != nil {
		return Set{}, unavailable("read", err)
	}
	set := Set{Epoch: m["_epoch"], Entries: map[string]Entry{}}
	if v, ok := m["_version"]; ok {
		if set.Version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return Set{}, unavailable("read", fmt.Errorf("version %q", v))
		}
	}
	now := time.Now()
	for f, v := range m {
		name, ok := strings.CutPrefix(f, "e:")
		if !ok {
			continue
		}
		e, ok := parseEntry(name, v)
		if !ok {
			set.Skipped++
			continue
		}
		if !e.Expires.IsZero() && !e.Expires.After(now) {
			continue
		}
		set.Entries[name] = e
	}
	return set, nil
}

// SetVersion returns the epoch and version of the set kind, for a reader
// to learn whether what it holds is still current.
func (s *Store) SetVersion(ctx context.Context, kind string) (epoch string, version int64, err error) {
	if err := checkKind(kind); err != nil {
		return "", 0, err
	}
	c, err := s.get("version")
	if err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	vs, err := c.Do(ctx, c.B().Hmget().Key(s.setKey(kind)).Field("_epoch", "_version").Build()).ToArray()
	if err != nil || len(vs) != 2 {
		return "", 0, unavailable("version", err)
	}
	epoch, _ = vs[0].ToString()
	if v, err := vs[1].ToString(); err == nil {
		if version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return "", 0, unavailable("version", fmt.Errorf("version %q", v))
		}
	}
	return epoch, version, nil
}

// parseSet reads {epoch, version, name1, value1, ...}.
func parseSet(vs []rueidis.RedisMessage) (Set, error) {
	if len(vs) < 2 || len(vs)%2 != 0 {
		return Set{}, fmt.Errorf("answer of %d values", len(vs))
	}
	epoch, err := vs[0].ToString()
	if err != nil {
		return Set{}, err
	}
	v, err := vs[1].ToString()
	if err != nil {
		return Set{}, err
	}
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return Set{}, fmt.Errorf("version %q", v)
	}
	set := Set{Epoch: epoch, Version: version, Entries: map[string]Entry{}}
	for i := 2; i < len(vs); i += 2 {
		name, err1 := vs[i].ToString()
		value, err2 := vs[i+1].ToString()
		if err1 != nil || err2 != nil {
			set.Skipped++
			continue
		}
		e, ok := parseEntry(name, value)
		if !ok {
			set.Skipped++
			continue
		}
		set.Entries[name] = e
	}
	return set, nil
}

// parseEntry reads "EXPIRES VALUE".
func parseEntry(name, v string) (Entry, bool) {
	if len(name)+len(v) > MaxEntryBytes+21 {
		return Entry{}, false
	}
	exp, value, ok := strings.Cut(v, " ")
	ms, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || ms < 0 {
		return Entry{}, false
	}
	e := Entry{Value: []byte(value)}
	if ms > 0 {
		e.Expires = time.UnixMilli(ms)
	}
	return e, true
}
