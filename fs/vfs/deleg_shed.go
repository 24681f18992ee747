package vfs

// Bounding what read delegations keep, mount-wide: the names known of
// delegated directories, and the names the kernel was told under them
// (each a dentry and an inode in the kernel, and a node in go-fuse, that
// the kernel keeps as long as it likes on a machine with memory to spare:
// what it is told under a delegation it is told to keep). A find or du of
// a million files would otherwise keep a million of each (1.4 GiB). Past
// Options.NamesKept, the states of the directories used least recently are
// shed: their names forgotten, and the kernel told to forget what it was
// told of them, as a recall does, but the delegation kept (giving it back
// is a write to the store, and the next look into the directory would ask
// for it again). The kernel then forgets the entries nobody uses, and
// go-fuse their nodes (FORGET).

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/esfs/esfs/store"
)

const (
	// DefaultNamesKept bounds the names delegations keep (Options.NamesKept),
	// known and told to the kernel, summed over directories: a few hundred
	// bytes each here and in go-fuse, and a dentry and an inode in the
	// kernel. One directory may hold maxDelegNames of each, and the one in
	// use is not shed, so that a directory of that size is still answered
	// from memory: 200,000 names, about 200 MiB with the kernel's part.
	DefaultNamesKept = 2 * maxDelegNames
	// heldNameBytes is about what a name held costs the daemon's heap,
	// with the go-fuse node of a name told to the kernel (measured: 460
	// bytes, du of 300,000 files).
	heldNameBytes = 512
)

// grew counts a name newly held; every sixteenth of the bound, the states
// are summed, and shed if past it, in the background.
func (ds *delegs) grew() {
	if ds.grown.Add(1)%uint64(max(ds.f.opts.NamesKept/16, 1)) != 0 || !ds.shedding.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer ds.shedding.Store(false)
		ds.shed(ds.f.opts.NamesKept)
	}()
}

// shed forgets the states of the directories used least recently, all
// but the last used, until what is held is down to three quarters of
// most, if it is past most. It returns what is held after.
func (ds *delegs) shed(most int) int {
	ds.mu.Lock()
	states := slices.Collect(maps.Values(ds.by))
	ds.mu.Unlock()
	held := 0
	for _, st := range states {
		st.mu.Lock()
		held += len(st.names) + len(st.kernel)
		st.mu.Unlock()
	}
	ds.held.Store(int64(held))
	ds.f.metrics.namesKept.Set(float64(held))
	if held <= most {
		return held
	}
	slices.SortFunc(states, func(a, b *dirState) int { return cmp.Compare(a.used.Load(), b.used.Load()) })
	for _, st := range states[:len(states)-1] {
		if held <= most*3/4 {
			break
		}
		held -= ds.forget(st)
	}
	ds.f.log.Debug("delegations shed the names of the directories used least recently", "held", held, "bound", most)
	ds.held.Store(int64(held))
	ds.f.metrics.namesKept.Set(float64(held))
	return held
}

// forget drops what st knows of its directory's names, and makes the
// kernel forget what it was told of them, returning how many names went.
// A state whose knowledge cannot be dropped is left alone: a write
// delegation's (what this mount changed in memory lands from it), one
// moved to an upgrade, and one with a change of the directory's own
// document or a lookup's answer under way (see recall: an answer told
// the kernel after its name was invalidated would be kept).
func (ds *delegs) forget(st *dirState) int {
	if st.d.Writable() {
		return 0
	}
	st.mu.Lock()
	if st.moved || st.writes.pending != 0 || st.answering.Load() != 0 || st.d.Revoked() {
		st.mu.Unlock()
		return 0
	}
	n := len(st.names) + len(st.kernel)
	var inos []uint64
	for _, e := range st.names {
		if e.attr != nil {
			inos = append(inos, e.ino)
		}
	}
	told := slices.Collect(maps.Keys(st.kernel))
	var toldDirs map[string]bool
	for _, name := range told {
		if e, ok := st.names[name]; ok && e.typ == store.TypeDir {
			if toldDirs == nil {
				toldDirs = map[string]bool{}
			}
			toldDirs[name] = true
		}
	}
	attrNodes := slices.Collect(maps.Values(st.attrTold))
	kn := st.node
	st.names, st.kernel, st.attrTold = map[string]dirEntry{}, map[string]bool{}, map[uint64]KernelNode{}
	// A listing running across this is not taken as complete.
	st.complete = false
	st.changed++
	st.mu.Unlock()
	ds.mu.Lock()
	for _, ino := range inos {
		if ds.attrsIn[ino] == st.ino {
			delete(ds.attrsIn, ino)
		}
	}
	ds.mu.Unlock()
	ds.f.metrics.shedNames.Add(float64(n))
	if ds.f.closed.Load() {
		return n
	}
	// Attributes first, as a recall does. A notification waits for the
	// kernel's lock of the directory, which a request of this mount may
	// hold: this runs in the background, and no request waits for it.
	for _, c := range attrNodes {
		_ = c.NotifyContent(-1, 0)
	}
	if kn != nil {
		// Files and absent names are dropped, which is what frees the
		// kernel's inodes and go-fuse's nodes. Directories are only
		// expired: one may be a process's working directory, which a
		// drop would unhash (KernelNode.ExpireEntry); they are few, and
		// their own states shed what is under them.
		for _, name := range told {
			if toldDirs[name] {
				_ = kn.ExpireEntry(name)
			} else {
				_ = kn.NotifyEntry(name) // ENOENT: the kernel had dropped it
			}
		}
	}
	return n
}

// giveBackOldest gives back the read delegation of the directory used
// least recently, as a recall does (the kernel forgets what it was told
// under it), to make room for a new one at the bound (maxDirs). Write
// delegations are left to recalls (what this mount made in memory would
// land first), as is a state in use: moved to an upgrade, with a write of
// its directory or a lookup's answer under way. It reports whether one
// went.
func (ds *delegs) giveBackOldest(ctx context.Context) bool {
	ds.mu.Lock()
	states := slices.Collect(maps.Values(ds.by))
	ds.mu.Unlock()
	slices.SortFunc(states, func(a, b *dirState) int { return cmp.Compare(a.used.Load(), b.used.Load()) })
	for _, st := range states {
		if st.d.Writable() || st.d.Revoked() {
			continue
		}
		st.mu.Lock()
		busy := st.moved || st.writes.pending != 0 || st.answering.Load() != 0
		st.mu.Unlock()
		if busy {
			continue
		}
		ds.f.co.Delegations.Give(ctx, st.d)
		return true
	}
	return false
}
