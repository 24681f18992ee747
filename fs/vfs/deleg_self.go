package vfs

import (
	"github.com/esfs/esfs/store"
)

// A delegated directory's own attributes (dirState.self) change only with
// its entries and its own setattrs, both of which recall other mounts'
// delegations first: while this mount holds the delegation, every write of
// the directory's inode document is this mount's own. Most of them are the
// item an entry change adds to its bulk (dirLinksOp): a compare-and-set of
// the whole document (a subdirectory made or removed), whose outcome is the
// document it wrote, or a partial update of the times (a file made or
// removed), whose outcome is the document before it with mtime and ctime
// set. Those are followed here (selfWrites), so that the attributes stay
// held across the mount's own changes: the kernel asks for the directory's
// attributes after every change in it, and a read of Elasticsearch for
// each would double the cost of a mkdir. Any other write of the document,
// a write whose outcome is unknown, or a compare-and-set that lost, drops
// them instead, after it landed.

// selfWrites follows this mount's writes of a delegated directory's own
// document, from the first that begins to the last that ends: a batch.
// Their order is the order of the versions Elasticsearch gave them.
type selfWrites struct {
	pending int  // writes begun and not yet ended
	known   bool // every write of the batch ended with a known outcome
	// full is the newest whole document known: the one held when the
	// batch began, or one a compare-and-set of the batch wrote.
	full    store.Inode
	hasFull bool
	// times is the newest partial update of the batch (mtime = ctime =
	// times), at version timesVer.
	times    int64
	timesVer store.Version
	hasTimes bool
}

// selfWrite is the outcome of one write of a directory's own document.
type selfWrite struct {
	known bool
	// full is the whole document written (a compare-and-set), else only
	// the times were set, to times, at version ver.
	full  *store.Inode
	times int64
	ver   store.Version
}

// newer reports whether version a comes after b in one document's history.
func newer(a, b store.Version) bool {
	if a.PrimaryTerm != b.PrimaryTerm {
		return a.PrimaryTerm > b.PrimaryTerm
	}
	return a.SeqNo > b.SeqNo
}

// writingSelf notes that a write of directory ino's own document begins;
// the result, nil if no delegation holds the directory, goes to wroteSelf
// once the write's outcome is known (or not: a begun write never ended
// keeps the attributes from being held again under this delegation, which
// errs on the safe side).
func (ds *delegs) writingSelf(ino uint64) *dirState {
	st := ds.state(ino)
	if st != nil {
		st.beginWrite()
	}
	return st
}

// beginWrite begins one write of the batch, which starts from the
// attributes held now, if any.
func (st *dirState) beginWrite() {
	st.mu.Lock()
	defer st.mu.Unlock()
	w := &st.writes
	if w.pending == 0 {
		*w = selfWrites{known: true, full: st.self, hasFull: st.hasSelf}
	}
	w.pending++
}

// wroteSelf records the outcome of a write of directory ino's own document
// that began with writingSelf (began). The attributes are held again once
// the batch's last write ended, if every outcome is known; until then
// they are not (a write of the batch that ended may be the end of a call
// already answered). A delegation granted after the write began does not
// know what it did: it drops them.
func (ds *delegs) wroteSelf(ino uint64, began *dirState, r selfWrite) {
	if ds == nil {
		return
	}
	if began != nil {
		began.endWrite(r)
	}
	if st := ds.state(ino); st != nil && st != began {
		st.mu.Lock()
		st.dropSelf()
		st.mu.Unlock()
	}
}

// endWrite ends one write of the batch, with outcome r.
func (st *dirState) endWrite(r selfWrite) {
	st.mu.Lock()
	defer st.mu.Unlock()
	w := &st.writes
	st.changed++ // reads under way may predate the write
	st.hasSelf = false
	w.pending--
	switch {
	case !r.known:
		w.known = false
	case r.full != nil:
		if !w.hasFull || newer(r.full.Ver, w.full.Ver) {
			w.full, w.hasFull = *r.full, true
		}
	case !w.hasTimes || newer(r.ver, w.timesVer):
		w.times, w.timesVer, w.hasTimes = r.times, r.ver, true
	}
	if w.pending > 0 || !w.known || !w.hasFull {
		return
	}
	a := w.full
	if w.hasTimes && newer(w.timesVer, a.Ver) {
		a.Mtime, a.Ctime, a.Ver = w.times, w.times, w.timesVer
	}
	st.self, st.hasSelf = a, true
}

// dropSelf forgets the directory's own attributes: this mount changed them
// by other means than a followed write (st.mu held).
func (st *dirState) dropSelf() {
	st.changed++
	st.hasSelf = false
	if st.writes.pending > 0 {
		st.writes.known = false
	}
}

// selfAttr returns directory ino's own attributes, if its delegation
// holds them; node, the directory's kernel node, is told them.
func (ds *delegs) selfAttr(ino uint64, node KernelNode) (store.Inode, bool) {
	st := ds.state(ino)
	if st == nil {
		return store.Inode{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.hasSelf || st.d.Revoked() {
		return store.Inode{}, false
	}
	if node != nil {
		st.attrTold[ino] = node
	}
	return st.self, true
}

// ownAttr is directory ino's own attributes as this mount holds them: made
// here and not flushed (writeback.overlay), or held under its delegation
// (selfAttr). node, if not nil, is the kernel node being told them: the
// delegation's recall invalidates them, the pending ones too (the
// directory was born with its delegation), which the kernel would
// otherwise keep past the flush.
func (f *Mount) ownAttr(ino uint64, node KernelNode) (store.Inode, bool) {
	held := false
	a, ok := f.wb.overlay(ino, func() (store.Inode, bool) {
		held = true
		return f.delegs.selfAttr(ino, node)
	})
	if ok && !held && node != nil {
		if st := f.delegs.state(ino); st != nil {
			st.mu.Lock()
			st.attrTold[ino] = node
			st.mu.Unlock()
		}
	}
	return a, ok
}

// learnSelf records directory st's own attributes, read in real time
// after the grant, unless this mount changed the directory since
// (changes, read before the read began) or is changing it.
func (st *dirState) learnSelf(a store.Inode, changes uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	// A pending inode (no version: it is not stored yet) is not kept:
	// the pending batch holds it, and it changes there.
	if st.changed == changes && st.writes.pending == 0 && a.Ino == st.ino && a.Ver.Known() {
		st.self, st.hasSelf = a, true
	}
}
