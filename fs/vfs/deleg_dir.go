package vfs

// What a delegation knows of its directory (dirState): its names, what the
// kernel was told of them, its listing, and the changes this mount makes
// to it; see deleg.go.

import (
	"slices"

	"github.com/esfs/esfs/store"
)

// lookup answers name from the state: ok false when nothing is known. A
// positive answer is the name's inode and type (and attributes, if held);
// absent means the name does not exist. An answer given to the kernel
// goes through told and done.
func (st *dirState) lookup(name string) (e dirEntry, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok = st.names[name]
	if !ok && st.complete {
		return dirEntry{absent: true}, true
	}
	return e, ok
}

// told notes that the kernel is being told about name under the
// delegation. It returns false (tell nothing) if the delegation was
// revoked meanwhile; otherwise the caller must call done after replying.
func (st *dirState) told(name string, node KernelNode) bool {
	st.answering.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.d.Revoked() || st.moved {
		st.answering.Add(-1)
		return false
	}
	if !st.kernel[name] && len(st.kernel) >= maxDelegNames {
		// A name told but not recorded would not be invalidated on
		// recall, and the kernel keeps a delegated answer for long.
		st.answering.Add(-1)
		return false
	}
	if st.node == nil {
		st.node = node
	}
	if !st.kernel[name] {
		st.kernel[name] = true
		st.grew()
	}
	return true
}

func (st *dirState) done() { st.answering.Add(-1) }

// learn records what a read started after the grant found of name.
func (st *dirState) learn(name string, e dirEntry) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old, had := st.names[name]
	if had && !old.absent && !e.absent && old.ino == e.ino && old.typ == e.typ {
		return // the same entry: keep the attributes held with it
	}
	if had || len(st.names) < maxDelegNames {
		st.names[name] = e
		if !had {
			st.grew()
		}
	}
}

// grew: a name is newly held (see delegs.grew).
func (st *dirState) grew() {
	if st.owner != nil {
		st.owner.grew()
	}
}

// changedHere records this mount's own change of name: its outcome e if
// known (ok), else the name is forgotten, and the directory is no longer
// known complete. The directory's own attributes (its times, and link
// count for a subdirectory) are dropped, unless followed is set: the change
// wrote them through dirLinksOp, which follows them.
func (st *dirState) changedHere(name string, e dirEntry, ok, followed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if followed {
		st.changed++
	} else {
		st.dropSelf()
	}
	if !ok {
		delete(st.names, name)
		st.complete = false
		return
	}
	if _, had := st.names[name]; !had {
		st.grew()
	}
	st.names[name] = e
}

// listing returns the names of a complete state and their entries, in
// the order a listing from the store has (store.CompareNames), so that a
// directory lists in one order whether from memory or not. The entries
// are copied under the lock: the state changes beside the listing.
func (st *dirState) listing() ([]string, []dirEntry, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.complete {
		return nil, nil, false
	}
	names := make([]string, 0, len(st.names))
	for n, e := range st.names {
		if !e.absent {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, store.CompareNames) // as the store lists them
	entries := make([]dirEntry, len(names))
	for i, n := range names {
		entries[i] = st.names[n]
	}
	return names, entries, true
}

// listed makes the state complete after a listing of n entries that
// started (after a refresh) at own-change count since, was learned entry
// by entry and read to its end: unless this mount changed the directory
// meanwhile, or the bound on names dropped some.
func (st *dirState) listed(since uint64, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.changed != since || st.d.Revoked() {
		return
	}
	present := 0
	for _, e := range st.names {
		if !e.absent {
			present++
		}
	}
	st.complete = present == n
}

// isComplete says whether the state knows every name of its directory.
func (st *dirState) isComplete() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.complete
}

// changeCount is the own-change count, read before a listing.
func (st *dirState) changeCount() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.changed
}

// changedHere records an own change of name in directory dir, if this
// mount holds a delegation on it. A directory that the change names (moved
// there by a rename) has a new ctime: its own delegation drops it.
func (ds *delegs) changedHere(dir uint64, name string, e dirEntry, ok bool) {
	if st := ds.state(dir); st != nil {
		st.changedHere(name, e, ok, false)
		if !ok {
			ds.untell(st, name)
		}
		ds.upgrade(st)
	}
	if e.typ == store.TypeDir && e.ino != 0 {
		if sub := ds.state(e.ino); sub != nil {
			sub.mu.Lock()
			sub.dropSelf()
			sub.mu.Unlock()
		}
	}
}

// changedThroughDirLinks is changedHere for a change (a create) that wrote
// the directory's own document through dirLinksOp only, which follows it:
// the directory's attributes stay held if that write's outcome is known.
func (ds *delegs) changedThroughDirLinks(dir uint64, name string, e dirEntry, ok bool) {
	if st := ds.state(dir); st != nil {
		st.changedHere(name, e, ok, true)
		if !ok {
			ds.untell(st, name)
		}
		ds.upgrade(st)
	}
}

// untell makes the kernel forget name of st's directory, if it was told
// it under the delegation: a change of the name that failed, perhaps
// after it landed (an answer lost), leaves the state not knowing the
// name, and the kernel, which keeps what it was told under a delegation
// until a recall, must not answer from it either (a recall would not come:
// the change is this mount's own). The change's request holds the
// directory's lock in the kernel, which the notification waits for: it is
// sent in the background and goes in once the request has ended.
func (ds *delegs) untell(st *dirState, name string) {
	st.mu.Lock()
	told := st.kernel[name]
	delete(st.kernel, name)
	kn := st.node
	st.mu.Unlock()
	if !told || kn == nil || ds.f.closed.Load() {
		return
	}
	go func() { _ = kn.ExpireEntry(name) }() // ENOENT: the kernel had dropped it
}
