package events

import (
	"context"
	"fmt"
	"io"
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
	buf        []rueidis.XRangeEntry
	skipped    []string // entries of other routes, to acknowledge
	inFlight   map[*Event]string
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
	for {
		if len(s.buf) == 0 {
			if err := s.ackSkipped(ctx); err != nil {
				return nil, err
			}
			id := ">"
			if s.ownPending {
				id = s.after
			}
			res, err := s.c.Do(ctx, s.c.B().Xreadgroup().Group(s.group, replayConsumer).Count(readCount).
				Streams().Key(s.stream).Id(id).Build()).AsXRead()
			if err != nil && !rueidis.IsRedisNil(err) {
				return nil, fmt.Errorf("events: reading %s: %w", s.stream, err)
			}
			entries := res[s.stream]
			if len(entries) == 0 {
				if s.ownPending {
					s.ownPending = false
					continue
				}
				return nil, io.EOF
			}
			if s.ownPending {
				s.after = entries[len(entries)-1].ID
			}
			s.buf = entries
		}
		entry := s.buf[0]
		s.buf = s.buf[1:]
		// A pending entry that MAXLEN trimmed comes back without fields.
		e, ok := s.m.decode([]byte(entry.FieldValues["event"]), "stream", s.stream, "entry", entry.ID)
		if !ok {
			s.skipped = append(s.skipped, entry.ID)
			continue
		}
		if err := s.ackSkipped(ctx); err != nil {
			return nil, err
		}
		s.inFlight[e] = entry.ID
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
	if err := s.c.Do(ctx, s.c.B().Xack().Key(s.stream).Group(s.group).Id(id).Build()).Error(); err != nil {
		return fmt.Errorf("events: acknowledging %s in %s: %w", e.ID, s.stream, err)
	}
	delete(s.inFlight, e)
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
				entries, err := s.c.Do(ctx, s.c.B().Xrange().Key(s.stream).Start(id).End(id).Build()).AsXRange()
				if err != nil {
					return fmt.Errorf("events: XRANGE %s: %w", s.stream, err)
				}
				for _, entry := range entries {
					if e, ok := s.m.decode([]byte(entry.FieldValues["event"]), "stream", s.stream, "entry", entry.ID); ok && !fn(e) {
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
		entries, err := s.c.Do(ctx, s.c.B().Xrange().Key(s.stream).Start(start).End("+").Count(readCount).Build()).AsXRange()
		if err != nil {
			return fmt.Errorf("events: XRANGE %s: %w", s.stream, err)
		}
		for _, entry := range entries {
			start = "(" + entry.ID
			if e, ok := s.m.decode([]byte(entry.FieldValues["event"]), "stream", s.stream, "entry", entry.ID); ok && !fn(e) {
				return nil
			}
		}
		if len(entries) < readCount {
			return nil
		}
	}
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
