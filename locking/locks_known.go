// Taking locks in one round trip: what this mount last wrote of each lock
// document stands in for reading it.

package locking

import (
	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// knownDocs remembers the lock documents this manager last wrote, as its
// writes left them (or that it deleted them), so that an acquire can send
// its conditional writes without reading the documents first: one round
// trip instead of two. A document it never wrote is guessed absent, which
// is what a lock nobody holds is (the last release deletes it). Every grant
// is still a compare-and-set or a create-if-absent, so a wrong guess
// cannot grant anything: its write fails, and costs the round trip it
// tried to save before the read-then-write path runs.
type knownDocs struct {
	mu   lockorder.Mutex
	docs map[string]store.LockDoc
}

// maxKnownDocs bounds the memory: past it the map starts again empty,
// which only makes guesses "absent" until the mount writes them again.
const maxKnownDocs = 4096

// wrote records d as a write of this manager left it (deleted: it is gone).
func (k *knownDocs) wrote(d store.LockDoc, deleted bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.docs == nil || len(k.docs) >= maxKnownDocs {
		k.docs = make(map[string]store.LockDoc, 64)
	}
	if deleted {
		d = store.LockDoc{ID: d.ID, Path: d.Path}
	}
	k.docs[d.ID] = d
}

// forget drops what is known of document id: a write of ours failed, so
// someone else changed it.
func (k *knownDocs) forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.docs, id)
}

// guess returns the documents of reqs as this mount last left them, if
// none of them would refuse session's operation op: the guess is only
// worth sending when it would be granted. Deciding a conflict is the
// read-then-write path's job, with documents read now.
func (k *knownDocs) guess(sessionID, op string, reqs []Request) ([]store.LockDoc, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	docs := make([]store.LockDoc, len(reqs))
	for i, r := range reqs {
		d, ok := k.docs[r.ID]
		if !ok {
			d = store.LockDoc{ID: r.ID, Path: r.Path}
		}
		if len(d.Waiters) > 0 {
			return nil, false
		}
		for _, h := range d.Holders {
			if h.Session == sessionID && h.Op == op {
				continue
			}
			if !compatible(h.Mode, r.Mode) && !ownDelegEntry(r, sessionID, h) {
				return nil, false
			}
		}
		// The caller's plan rewrites the holders; it must not share
		// their backing array with the map.
		d.Holders = append([]store.Holder(nil), d.Holders...)
		docs[i] = d
	}
	return docs, true
}
