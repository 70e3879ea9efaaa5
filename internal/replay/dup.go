package replay

import (
	"encoding/json"
	"hash/maphash"

	"github.com/floodgate-gw/floodgate/events"
)

// recentIDs remembers the last maxRecentIDs events it was given, to tell
// an event the sink holds twice. Delivery is at least once: a batch the
// sink took after the recorder stopped waiting for it is spooled and
// delivered again, so the second copy comes soon after the first, with at
// most the other events recorded meanwhile between them. A copy that
// comes after its first was handled in an earlier run is not told: that
// is what the Idempotency-Key the replay sends is for.
//
// It keeps hashes, 16 bytes an event, whatever the length of the ids an
// entry of the sink holds; their seed is drawn for each run, so that no
// one who writes to the sink can make two ids collide.
type recentIDs struct {
	seed maphash.Seed
	seen map[uint64]uint64 // the id's hash: the hash of the event's contents
	ring []uint64          // the ids' hashes in seen, the oldest at next once full
	next int
}

// maxRecentIDs bounds the memory of events, 2 MiB of hashes: a span of
// a second copy sent seconds after the first by a fleet that records tens
// of thousands of events a second.
const maxRecentIDs = 1 << 17

// A copy is what add makes of an event.
type copyOf uint8

const (
	firstCopy copyOf = iota
	sameCopy         // the event again, as the first copy had it
	otherCopy        // its id again, with other contents: not the event the first was
)

// add remembers e and says whether it is the first copy of its id, or
// another of the same contents, or of other contents.
func (r *recentIDs) add(e *events.Event) copyOf {
	if r.seen == nil {
		r.seed = maphash.MakeSeed()
		r.seen = map[uint64]uint64{}
	}
	id := maphash.String(r.seed, e.ID)
	data, _ := json.Marshal(e) // an event that was decoded encodes
	sum := maphash.Bytes(r.seed, data)
	if first, ok := r.seen[id]; ok {
		if first == sum {
			return sameCopy
		}
		return otherCopy
	}
	if len(r.ring) < maxRecentIDs {
		r.ring = append(r.ring, id)
	} else {
		delete(r.seen, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % maxRecentIDs
	}
	r.seen[id] = sum
	return firstCopy
}
