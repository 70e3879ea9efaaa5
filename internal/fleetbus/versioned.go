package fleetbus

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// A versioned set is a small map that the instances sharing a store keep
// alike: the gateway's runtime overrides, the fleet's breaker forces. It
// lives in one hash under the prefix, PREFIX + kind, and every change
// makes a new version of the whole, announced on the channel PREFIX +
// kind. An instance that missed an announcement (it was not subscribed, Redis restarted) learns of the
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

// ErrBadSet is wrapped, with limit.ErrStoreUnavailable, by a read or a
// change of a set that holds what floodgate does not write (a version
// that is not a number): nothing was changed.
var ErrBadSet = errors.New("the set holds what floodgate does not write")

// ErrUnknown is wrapped, with limit.ErrStoreUnavailable, by a change whose
// answer did not come: Redis may have made it.
var ErrUnknown = errors.New("the change was sent and its answer did not come: it may have been made")

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

	// Now is the Redis clock when the set was read, which the entries'
	// Expires go by: a reader compares them with its own clock shifted
	// by the difference, so that a clock that is off does not end an
	// entry early or late.
	Now time.Time

	// Replaced is the value that the change returning the set replaced
	// or removed; nil: none, or not a change.
	Replaced []byte

	// Skipped counts the entries left out because they are not what Put
	// writes or are larger than MaxEntryBytes.
	Skipped int
}

// An Entry is one value of a set.
type Entry struct {
	Value   []byte
	Expires time.Time // by the Redis clock; zero: never
}

func (b *Bus) setKey(kind string) string { return "{" + b.prefix + kind + "}:set" }

// Put sets the entry name of the set kind to value, for ttl when it is
// positive (then it is gone for every reader), makes a new version and
// announces it. It returns the set after the change. An error wrapping
// limit.ErrStoreUnavailable means Redis did not answer, and whether the
// change was made is unknown (ErrUnknown says so when the call was sent);
// any other error means it was not.
func (b *Bus) Put(ctx context.Context, kind, name string, value []byte, ttl time.Duration) (Set, error) {
	if len(name)+len(value) > MaxEntryBytes {
		return Set{}, fmt.Errorf("redisstore: entry of %d bytes, over %d", len(name)+len(value), MaxEntryBytes)
	}
	set, _, err := b.change(ctx, kind, "put", name, value, ttl)
	return set, err
}

// Delete removes the entry name of the set kind. changed is false when
// there was none, and then no version is made.
func (b *Bus) Delete(ctx context.Context, kind, name string) (set Set, changed bool, err error) {
	return b.change(ctx, kind, "del", name, nil, 0)
}

func (b *Bus) change(ctx context.Context, kind, op, name string, value []byte, ttl time.Duration) (Set, bool, error) {
	if err := checkKind(kind); err != nil {
		return Set{}, false, err
	}
	if name == "" {
		return Set{}, false, errors.New("redisstore: an entry needs a name")
	}
	c, err := b.conn.Client(op)
	if err != nil {
		return Set{}, false, err
	}
	var e [8]byte
	rand.Read(e[:])
	ms := int64(0)
	if ttl > 0 {
		ms = max(ttl.Milliseconds(), 1)
	}
	ctx, cancel := context.WithTimeout(ctx, max(b.timeout, changeTimeout))
	defer cancel()
	args := []string{
		op, name, string(value), strconv.FormatInt(ms, 10), hex.EncodeToString(e[:]),
		b.prefix + kind, strconv.Itoa(MaxEntries),
	}
	vs, err := versionedScript.Exec(ctx, c, []string{b.setKey(kind)}, args).ToArray()
	// A connection Redis closed while idle (a restart) fails the first
	// call on it, which rueidis does not send again as it does a read;
	// the client holds a few such connections. A put sent twice puts the
	// same entry: it goes again while connections fail so, a few times.
	for try := 0; op == "put" && brokenConn(err) && try < maxPutRetries; try++ {
		vs, err = versionedScript.Exec(ctx, c, []string{b.setKey(kind)}, args).ToArray()
	}
	if err != nil {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "FULL "):
			return Set{}, false, fmt.Errorf("%w: %s", ErrFull, strings.TrimPrefix(msg, "FULL "))
		case strings.HasPrefix(msg, "BADVERSION "):
			// Nothing was written: the script stops before.
			return Set{}, false, unavailable(op, fmt.Errorf("%w: %s", ErrBadSet, strings.TrimPrefix(msg, "BADVERSION ")))
		case errors.Is(err, context.DeadlineExceeded):
			// Sent, and no answer: a Redis that was only slow runs it.
			return Set{}, false, unavailable(op, fmt.Errorf("%w: %v", ErrUnknown, err))
		}
		return Set{}, false, unavailable(op, err)
	}
	set, changed, err := parseSet(vs)
	if err != nil {
		return Set{}, false, unavailable(op, err)
	}
	return set, changed, nil
}

// Read returns the set kind as Redis holds it: empty, with version 0,
// when there is none.
func (b *Bus) Read(ctx context.Context, kind string) (Set, error) {
	if err := checkKind(kind); err != nil {
		return Set{}, err
	}
	c, err := b.conn.Client("read")
	if err != nil {
		return Set{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, max(b.timeout, changeTimeout))
	defer cancel()
	vs, err := versionedScript.Exec(ctx, c, []string{b.setKey(kind)}, []string{"read"}).ToArray()
	if err != nil {
		if msg := err.Error(); strings.HasPrefix(msg, "BADVERSION ") {
			err = fmt.Errorf("%w: %s", ErrBadSet, strings.TrimPrefix(msg, "BADVERSION "))
		}
		return Set{}, unavailable("read", err)
	}
	set, _, err := parseSet(vs)
	if err != nil {
		return Set{}, unavailable("read", err)
	}
	return set, nil
}

// SetVersion returns the epoch and version of the set kind, for a reader
// to learn whether what it holds is still current.
func (b *Bus) SetVersion(ctx context.Context, kind string) (epoch string, version int64, err error) {
	if err := checkKind(kind); err != nil {
		return "", 0, err
	}
	c, err := b.conn.Client("version")
	if err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	vs, err := c.Do(ctx, c.B().Hmget().Key(b.setKey(kind)).Field("_epoch", "_version").Build()).ToArray()
	if err == nil && len(vs) != 2 {
		err = fmt.Errorf("answer of %d values", len(vs))
	}
	if err != nil {
		return "", 0, unavailable("version", err)
	}
	epoch, _ = vs[0].ToString()
	if v, err := vs[1].ToString(); err == nil {
		if version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return "", 0, unavailable("version", fmt.Errorf("%w: version %.40q", ErrBadSet, v))
		}
	}
	return epoch, version, nil
}

// parseSet reads {changed, now, replaced, epoch, version, name1,
// value1, ...}, leaving out the entries gone by the Redis clock.
func parseSet(vs []rueidis.RedisMessage) (Set, bool, error) {
	if len(vs) < 5 || len(vs)%2 != 1 {
		return Set{}, false, fmt.Errorf("answer of %d values", len(vs))
	}
	changed, err := vs[0].AsInt64()
	if err != nil {
		return Set{}, false, err
	}
	nowMS, err := vs[1].AsInt64()
	if err != nil {
		return Set{}, false, err
	}
	epoch, err := vs[3].ToString()
	if err != nil {
		return Set{}, false, err
	}
	v, err := vs[4].ToString()
	if err != nil {
		return Set{}, false, err
	}
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return Set{}, false, fmt.Errorf("version %q", v)
	}
	set := Set{Epoch: epoch, Version: version, Entries: map[string]Entry{}, Now: time.UnixMilli(nowMS)}
	if r, err := vs[2].ToString(); err == nil {
		if e, ok := parseEntry("", r); ok {
			set.Replaced = e.Value
		}
	}
	for i := 5; i < len(vs); i += 2 {
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
		if !e.Expires.IsZero() && !e.Expires.After(set.Now) {
			continue
		}
		set.Entries[name] = e
	}
	return set, changed == 1, nil
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

// maxPutRetries bounds how many times a put goes again on a connection
// that broke under it: more than the connections a client holds.
const maxPutRetries = 8

// brokenConn reports an error of the connection itself, not of Redis's
// answer: the connection was closed or reset under the call.
func brokenConn(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET))
}
