package main

// recentIDs remembers the last maxRecentIDs event ids it was given, to
// tell an event the sink holds twice. Delivery is at least once: a batch
// the sink took after the recorder stopped waiting for it is spooled and
// delivered again, so the second copy comes soon after the first, with
// at most the other events recorded meanwhile between them. The zero
// value is ready to use.
type recentIDs struct {
	set  map[string]struct{}
	ring []string // the ids in set, the oldest at next once full
	next int
}

// maxRecentIDs bounds the memory of ids: about 15 MB at 32-byte ids,
// which spans a second copy sent seconds after the first by a fleet that
// records tens of thousands of events a second.
const maxRecentIDs = 1 << 17

// add remembers id and reports whether it is new.
func (r *recentIDs) add(id string) bool {
	if _, ok := r.set[id]; ok {
		return false
	}
	if r.set == nil {
		r.set = map[string]struct{}{}
	}
	if len(r.ring) < maxRecentIDs {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % maxRecentIDs
	}
	r.set[id] = struct{}{}
	return true
}
