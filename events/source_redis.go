package events

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// replayConsumer is the consumer name inside a route's group. One replay
// per route runs at a time, so one name is enough, and a restarted replay
// finds its predecessor's unacknowledged entries under it.
const replayConsumer = "floodgate"

// readCount is how many stream entries one read fetches.
const readCount = 128

type redisSource struct {
	c       rueidis.Client
	stream  string
	group   string
	m       matcher
	created bool

	ownPending bool   // still reading the entries read before and not acknowledged
	after      string // in that phase, the last entry id read
	buf        []streamEntry
	skipped    []string // entries of other routes, to acknowledge
	inFlight   map[*Event]string
	atEnd      bool // the last Next found no more
}

func openRedisSource(ctx context.Context, rs RedisSink, m matcher) (*redisSource, error) {
	c, err := rueidis.NewClient(redisOptions(rs))
	if err != nil {
		return nil, fmt.Errorf("events: connecting to redis %v: %w", rs.Addrs, err)
	}
	return &redisSource{
		c:          c,
		stream:     rs.Stream,
		group:      ReplayGroup(m.route),
		m:          m,
		ownPending: true,
		after:      "0",
		inFlight:   map[*Event]string{},
	}, nil
}

// ensureGroup creates the route's group at the start of the stream, so
// that the first replay sees every event still in it.
func (s *redisSource) ensureGroup(ctx context.Context) error {
	if s.created {
		return nil
	}
	err := s.c.Do(ctx, s.c.B().XgroupCreate().Key(s.stream).Group(s.group).Id("0").Mkstream().Build()).Error()
	if err != nil && !rueidis.IsRedisBusyGroup(err) {
		return fmt.Errorf("events: creating consumer group %s on %s: %w", s.group, s.stream, err)
	}
	s.created = true
	return nil
}

func (s *redisSource) Next(ctx context.Context) (*Event, error) {
	if err := s.ensureGroup(ctx); err != nil {
		return nil, err
	}
	s.atEnd = false
	for {
		if len(s.buf) == 0 {
			if err := s.ackSkipped(ctx); err != nil {
				return nil, err
			}
			id := ">"
			if s.ownPending {
				id = s.after
			}
			entries, err := s.read(ctx, "group", s.group, replayConsumer, id)
			if err != nil {
				return nil, err
			}
			if len(entries) == 0 {
				if s.ownPending {
					s.ownPending = false
					continue
				}
				s.atEnd = true
				return nil, io.EOF
			}
			if s.ownPending {
				s.after = entries[len(entries)-1].id
			}
			s.buf = entries
		}
		entry := s.buf[0]
		s.buf = s.buf[1:]
		e, ok := s.decode(entry)
		if !ok {
			s.skipped = append(s.skipped, entry.id)
			continue
		}
		if err := s.ackSkipped(ctx); err != nil {
			return nil, err
		}
		s.inFlight[e] = entry.id
		return e, nil
	}
}

func (s *redisSource) ackSkipped(ctx context.Context) error {
	if len(s.skipped) == 0 {
		return nil
	}
	err := s.c.Do(ctx, s.c.B().Xack().Key(s.stream).Group(s.group).Id(s.skipped...).Build()).Error()
	if err != nil {
		return fmt.Errorf("events: acknowledging in %s: %w", s.stream, err)
	}
	s.skipped = s.skipped[:0]
	return nil
}

func (s *redisSource) Done(ctx context.Context, e *Event) error {
	id, ok := s.inFlight[e]
	if !ok {
		return fmt.Errorf("events: Done with an event Next did not return")
	}
	if lazyDone(e) {
		// Acknowledged with the entries passed over, before the next
		// event Next returns or at the end.
		s.skipped = append(s.skipped, id)
	} else if err := s.c.Do(ctx, s.c.B().Xack().Key(s.stream).Group(s.group).Id(id).Build()).Error(); err != nil {
		return fmt.Errorf("events: acknowledging %s in %s: %w", e.ID, s.stream, err)
	}
	delete(s.inFlight, e)
	if s.atEnd && len(s.inFlight) == 0 {
		// The last one done after Next found the end: no later read
		// acknowledges the admissions done before it.
		return s.ackSkipped(ctx)
	}
	return nil
}

func (s *redisSource) Pending(ctx context.Context, fn func(*Event) bool) error {
	// First the entries read and not acknowledged (in the group's PEL,
	// under our consumer), then those the group has not read yet.
	last := "0-0"
	groups, err := s.c.Do(ctx, s.c.B().XinfoGroups().Key(s.stream).Build()).ToArray()
	if err != nil && !isNoSuchKey(err) {
		return fmt.Errorf("events: XINFO GROUPS %s: %w", s.stream, err)
	}
	for _, g := range groups {
		info, err := g.AsMap()
		if err != nil {
			return err
		}
		name, lastID := info["name"], info["last-delivered-id"]
		if n, _ := name.ToString(); n != s.group {
			continue
		}
		if last, err = lastID.ToString(); err != nil {
			return err
		}
		start := "-"
		for {
			pend, err := s.c.Do(ctx, s.c.B().Xpending().Key(s.stream).Group(s.group).Start(start).End("+").
				Count(readCount).Consumer(replayConsumer).Build()).ToArray()
			if err != nil {
				return fmt.Errorf("events: XPENDING %s: %w", s.stream, err)
			}
			for _, p := range pend {
				f, err := p.ToArray()
				if err != nil || len(f) == 0 {
					return fmt.Errorf("events: XPENDING %s: unexpected reply", s.stream)
				}
				id, _ := f[0].ToString()
				start = "(" + id
				entries, err := s.read(ctx, "range", id, id)
				if err != nil {
					return err
				}
				for _, entry := range entries {
					if e, ok := s.decode(entry); ok && !fn(e) {
						return nil
					}
				}
			}
			if len(pend) < readCount {
				break
			}
		}
	}
	start := "(" + last
	for {
		entries, err := s.read(ctx, "range", start, "+")
		if err != nil {
			return err
		}
		for _, entry := range entries {
			start = "(" + entry.id
			if e, ok := s.decode(entry); ok && !fn(e) {
				return nil
			}
		}
		if len(entries) < readCount {
			return nil
		}
	}
}

// streamReadSource reads a Source's stream entries with each event longer
// than the bound replaced by its length. A stream entry has no STRLEN:
// XREADGROUP and XRANGE send every field whole, so without the script a
// forged entry of hundreds of megabytes (proto-max-bulk-len allows 512 MB)
// would be received and held before decode could look at its length. The
// script holds it on the server for a moment, where it already is.
//
//go:embed stream_read.lua
var streamReadSource string

// streamReadScript runs with EVALSHA, and EVAL when Redis answers NOSCRIPT;
// NOSCRIPT means the script did not run, so no entry was read twice.
var streamReadScript = rueidis.NewLuaScript(streamReadSource)

// streamEntry is an entry as stream_read.lua returns it.
type streamEntry struct {
	id    string
	event string // "" when the entry has none, or it is too long
	size  int64  // the event's length when it is too long; 0 otherwise
}

// read runs stream_read.lua in mode ("group" or "range") with args, for
// up to readCount entries.
func (s *redisSource) read(ctx context.Context, mode string, args ...string) ([]streamEntry, error) {
	argv := append([]string{strconv.FormatInt(s.m.max, 10), strconv.Itoa(readCount), mode}, args...)
	res, err := streamReadScript.Exec(ctx, s.c, []string{s.stream}, argv).ToArray()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("events: reading %s: %w", s.stream, err)
	}
	entries := make([]streamEntry, 0, len(res))
	for _, r := range res {
		f, err := r.ToArray()
		if err != nil || len(f) == 0 {
			return nil, fmt.Errorf("events: reading %s: unexpected reply", s.stream)
		}
		var e streamEntry
		if e.id, err = f[0].ToString(); err != nil {
			return nil, fmt.Errorf("events: reading %s: unexpected reply: %w", s.stream, err)
		}
		if len(f) > 1 {
			if f[1].IsInt64() {
				e.size, err = f[1].AsInt64()
			} else {
				e.event, err = f[1].ToString()
			}
			if err != nil {
				return nil, fmt.Errorf("events: reading %s: unexpected reply: %w", s.stream, err)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// decode is m.decode for a stream entry, which the script may have found
// too long.
func (s *redisSource) decode(e streamEntry) (*Event, bool) {
	if e.size > 0 {
		s.m.tooLong(e.size, "stream", s.stream, "entry", e.id)
		return nil, false
	}
	return s.m.decode([]byte(e.event), "stream", s.stream, "entry", e.id)
}

// isNoSuchKey reports the error XINFO gives for a stream that does not
// exist yet: nothing was recorded.
func isNoSuchKey(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(re.Error(), "no such key")
}

func (s *redisSource) Close() error {
	s.c.Close()
	return nil
}
