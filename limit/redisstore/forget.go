package redisstore

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
)

// What an instance knows from memory, other instances can make wrong: a
// reset deletes a key's count, and on a cluster a request rejected in one
// slot gives back what another slot took for it, which another instance
// may have seen as a key with nothing left. Each such change is published
// on the channel PREFIX + "forget", and every store that listens forgets
// what it remembers of the key: its entry in the table of exhausted keys
// and its slice. A store that loses the channel (Redis restarted, or the
// connection broke) may have missed some, and forgets every exhausted key
// (its slices lapse with their windows).

// forgetChannel is where a store with prefix publishes forgotten keys.
func forgetChannel(prefix string) string { return prefix + "forget" }

// forgetMessage names a rule's counter for a key, from the store whose
// token is from: the token, the rule's name and the key, each after a
// newline (which none of them holds). A store skips its own: it forgot the
// key as it published.
func forgetMessage(from, name string, k limit.Key) string {
	return from + "\n" + name + "\n" + string(k)
}

// publishForget tells every store on the channel to forget l's key. It
// runs after the change it announces, and a failure to publish leaves the
// others' entries to their end.
func (s *Store) publishForget(ctx context.Context, c rueidis.Client, ls ...limit.Limit) {
	if len(ls) == 0 {
		return
	}
	ch := forgetChannel(s.prefix)
	cmds := make(rueidis.Commands, len(ls))
	for i, l := range ls {
		cmds[i] = c.B().Publish().Channel(ch).Message(forgetMessage(s.token, l.Rule.Name, l.Key)).Build()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	c.DoMulti(ctx, cmds...)
}

// listen receives the forgotten keys until the store closes. While it is
// not subscribed, entries are forgotten as they are made: every return of
// Receive is a gap in which messages may have been lost.
func (s *Store) listen() {
	defer s.wg.Done()
	backoff := minBackoff
	for s.life.Err() == nil {
		if c, err := s.get("listen"); err == nil {
			start := time.Now()
			ch := forgetChannel(s.prefix)
			c.Receive(s.life, c.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
				from, rest, _ := strings.Cut(m.Message, "\n")
				if name, key, ok := strings.Cut(rest, "\n"); ok && from != s.token {
					s.forgetLocally(name, limit.Key(key))
				}
			})
			if time.Since(start) > 10*time.Second {
				backoff = minBackoff // it was subscribed: a fresh failure
			}
		}
		s.forgetAll()
		select {
		case <-s.life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// forgetLocally drops what this store remembers of rule name's counters
// for k.
func (s *Store) forgetLocally(name string, k limit.Key) {
	if s.local != nil {
		s.local.Forget(name, k)
	}
	s.slices.mu.RLock()
	var drop []*slice
	for id, sl := range s.slices.m {
		if id.name == name && id.key == k {
			drop = append(drop, sl)
		}
	}
	s.slices.mu.RUnlock()
	for _, sl := range drop {
		sl.drop()
	}
}

// forgetAll drops what this store remembers of exhausted keys. Slices
// stay: Redis counted them when it granted them, and they lapse with
// their windows, so an instance cut off from Redis admits what it holds.
func (s *Store) forgetAll() {
	if s.local != nil {
		s.local.ForgetAll()
	}
}
