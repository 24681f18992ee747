package locking

// Delegations born with a directory (in a create's bulk or a batch), and
// the recall of the writers before a command reads the whole filesystem;
// see delegations.go.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Born returns the write that grants this mount a read delegation on
// directory ino as it is made: sent in the same bulk as the directory's
// documents, it costs no round trip, and since nobody else can know the
// directory yet it cannot conflict. made turns the write's result into the
// delegation; pass whether the directory itself was made (if not, the
// delegation is given back at once). It returns nil when nothing is held.
func (ds *Delegations) Born(ino uint64, path string, mode store.LockMode) (store.BulkOp, func(res store.BulkResult, made bool) *Delegation) {
	sess := ds.c.Session()
	op := sess.LeaseOp()
	req := Request{ID: store.DelegLockID(ino), Path: path, Mode: mode}
	doc := store.LockDoc{ID: req.ID, Path: path, Holders: []store.Holder{{Session: sess.ID(), Op: op, Mode: req.Mode, Since: time.Now().UnixNano()}}}
	write := store.WriteLock(store.LockWrite{Doc: doc})
	// Under way until the result is known: a recall meanwhile must not
	// take the entry for a stray one (releaseStray).
	done := make(chan struct{})
	ds.mu.Lock()
	ds.pending[ino] = done
	ds.mu.Unlock()
	return write, func(res store.BulkResult, made bool) *Delegation {
		defer func() {
			ds.mu.Lock()
			if ds.pending[ino] == done {
				delete(ds.pending, ino)
			}
			ds.mu.Unlock()
			close(done)
		}()
		if res.Err != nil {
			// The document may have landed all the same (an answer
			// lost): an entry under a lease op, which lives as long as
			// the session, that this mount would never answer a recall
			// for, holding every other mount's change of the directory
			// until its lock timeout. Remove it if it is there.
			go ds.c.Locks.releaseUnknown(sess, op, []Request{req})
			return nil
		}
		doc.Found, doc.Ver = true, res.Ver
		d := &Delegation{Ino: ino, Path: path, Mode: req.Mode, sess: sess, op: op,
			held: &Held{Op: op, Session: sess.ID(), docs: []store.LockDoc{doc}, reqs: []Request{req}}, recalled: make(chan struct{})}
		ds.mu.Lock()
		old := ds.held[ino]
		if made && old == nil {
			ds.held[ino] = d
		}
		ds.mu.Unlock()
		if !made || old != nil {
			go func() {
				ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), ds.c.cfg.Lease)
				defer cancel()
				if err := ds.c.Locks.releaseOrOwe(ctx, sess, d.held); err != nil {
					ds.c.log.Debug("giving back the delegation of a directory not made", "dir", ino, "err", err)
				}
			}()
			return nil
		}
		// Later acquires of the document (an rmdir of the directory takes
		// its change lock) guess it from here, as from any grant.
		ds.c.Locks.known.wrote(doc, false)
		ds.c.Locks.metrics.delegHeld(req.Mode, 1)
		return d
	}
}

// BornInBatch is Born for a directory made in memory under a write
// delegation: the delegation (mode store.Exclusive) holds from now on in
// this mount; its document is written in the stage of the batch that
// makes the directory (BatchSpec.Born), or Landed says that it never will
// be.
func (ds *Delegations) BornInBatch(ino uint64, path string) *Delegation {
	sess := ds.c.Session()
	op := sess.LeaseOp()
	req := Request{ID: store.DelegLockID(ino), Path: path, Mode: store.Exclusive}
	doc := store.LockDoc{ID: req.ID, Path: path, Holders: []store.Holder{{Session: sess.ID(), Op: op, Mode: req.Mode, Since: time.Now().UnixNano()}}}
	d := &Delegation{Ino: ino, Path: path, Mode: req.Mode, sess: sess, op: op,
		held: &Held{Op: op, Session: sess.ID(), docs: []store.LockDoc{doc}, reqs: []Request{req}}, recalled: make(chan struct{})}
	ds.mu.Lock()
	ds.held[ino] = d
	ds.mu.Unlock()
	ds.c.Locks.metrics.delegHeld(req.Mode, 1)
	return d
}

// BornDoc is the write of the document of d, born in batch op: nobody
// else can know the directory before the batch lands, so it overwrites
// whatever an earlier try of the batch left.
func (d *Delegation) BornDoc(op string) store.BulkOp {
	doc := d.markedDoc(op)
	doc.Found, doc.Ver = true, store.Version{}
	return store.WriteLock(store.LockWrite{Doc: doc})
}

// landed records that d's document, born in a batch, was written at
// version v.
func (d *Delegation) landed(v store.Version) {
	d.mu.Lock()
	d.held.docs[0].Found, d.held.docs[0].Ver = true, v
	d.mu.Unlock()
}

// Landed records the outcome of the batch that makes d's directory, when
// it is not Flush that wrote d's document: landed (res without an error;
// its version is not known), or never to land (the batch was lost: this
// mount was fenced). A delegation that will never be written is revoked
// and given back as a recall gives one back, the Recall callback first:
// what this mount answered under it, its kernel included, must go, since
// nothing will recall it. That runs in the background, as a recall does:
// the caller (a flush) holds what the callback waits for.
func (ds *Delegations) Landed(d *Delegation, res store.BulkResult) {
	if res.Err == nil {
		d.landed(res.Ver)
		return
	}
	d.revoke()
	go func() {
		ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), ds.c.cfg.Lease)
		defer cancel()
		ds.Give(ctx, d)
	}()
}

// RecallWriter returns once no other mount holds directory ino (at path)
// for writing: a reader that found it written elsewhere
// (store.LockDoc.WrittenElsewhere) calls it before it reads, so that it
// sees everything the writer made there. The writer is recalled, and
// flushes before it gives the delegation back; a writer that does not
// answer is waited for until it is declared dead. The request's own entry
// is released at once: it conflicts with write delegations only, so it
// never waits for changes or readers.
func (ds *Delegations) RecallWriter(ctx context.Context, ino uint64, path string) error {
	sess := ds.c.live(ctx)
	op := sess.LeaseOp()
	req := Request{ID: store.DelegLockID(ino), Path: path, Mode: store.Flushed}
	held, err := ds.c.Locks.Acquire(ctx, sess, op, []Request{req})
	if err != nil {
		return err
	}
	// A lease op's entry: never judged finished by others, so owed if
	// its release fails.
	return ds.c.Locks.releaseOrOwe(ctx, sess, held)
}

// recallWritersAtOnce bounds the recalls RecallWriters has in flight:
// each waits for a holder's poll and flush, mostly idle time.
const recallWritersAtOnce = 8

// RecallWriters recalls every other mount that writes a directory in
// memory, and returns once each has flushed, with how many there were: a
// reader outside the mounts (export, search) then finds in the store
// everything that calls which returned before it began had made. Every
// writer is recalled, not only those under the part being read: a
// delegation document's path is for display and may be stale.
func (ds *Delegations) RecallWriters(ctx context.Context) (int, error) {
	locks, err := ds.c.b.SearchLocks(ctx)
	if err != nil {
		return 0, err
	}
	self := ds.c.Session().ID()
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, recallWritersAtOnce)
		mu    lockorder.Mutex
		first error
		n     int
	)
	for _, l := range locks {
		if !store.IsDelegLock(l.ID) || !l.WrittenElsewhere(self) {
			continue
		}
		ino, perr := strconv.ParseUint(strings.TrimPrefix(l.ID, "D"), 10, 64)
		if perr != nil {
			continue // not a delegation of this format: nothing writes it
		}
		n++
		wg.Add(1)
		slots <- struct{}{}
		go func(ino uint64, path string) {
			defer func() { <-slots; wg.Done() }()
			if err := ds.RecallWriter(ctx, ino, path); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("recalling the mount that writes %s: %w", path, err)
				}
				mu.Unlock()
			}
		}(ino, l.Path)
	}
	wg.Wait()
	return n, first
}
