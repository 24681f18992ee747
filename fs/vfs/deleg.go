package vfs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Read delegations (see locking.Delegations): while this mount holds one
// on a directory, no other mount can change the directory's entries, or
// their attributes, without recalling it first, so what this mount learned
// of them since the grant stays true: a name's inode and type, or its
// absence; once a whole listing was read after the grant (or the directory
// was made here, empty), every name; the attributes of its files with one
// link that its inode records in the directory (store.Inode.Parents; a
// file with more may change through another directory), and the directory's own attributes (its
// times and link count change with its entries). Lookups, negative
// lookups, listings and stats are then answered from memory. Every change
// of an entry's attributes takes the change lock of the directory the
// stored inode names (store.Inode.HeldBy, FS.updateInodeFrom's attrLock),
// so it recalls first. On recall
// the state is dropped, and every name and attribute the kernel was told
// under the delegation is invalidated in the kernel before the delegation
// is given back, so a change made after the recall is seen at once by this
// mount too.
//
// With delegations on, whatever no delegation covers is read in real time
// and the kernel is told not to keep it: nothing would tell this mount
// when it changes.
//
// A directory is asked for in the background at the first lookup that
// finds none held (a grant costs one or two round trips, which the lookup
// does not wait for), and before its first listing, which waits for the
// answer: the listing then answers the entries with attributes the kernel
// keeps (see Listing.start).

const (
	// maxDelegDirs bounds the delegations a mount holds at once (each is
	// an entry in a lock document and a few hundred bytes here). A
	// listing that finds it reached gives back the one used least
	// recently (giveBackOldest); a lookup's grant is not asked for.
	maxDelegDirs = 4096
	// maxDelegNames bounds the names known of one directory; past it, the
	// directory is no longer known complete and new names are not kept.
	maxDelegNames = 100000
	// upgradeEvery bounds how often a directory's upgrade to a write
	// delegation is asked for: in one that other mounts read too, each
	// try is a request for nothing.
	upgradeEvery = time.Second
)

// dirEntry is what is known of one name of a delegated directory.
type dirEntry struct {
	ino    uint64
	typ    store.FileType
	absent bool
	// attr, if not nil, are the entry's attributes, read after the grant.
	// A pointer, never changed in place (replaced): most entries, learnt
	// from listings, hold none, and a whole Inode in each would cost a
	// large directory's names 200 bytes apiece.
	attr *store.Inode
}

// dirState is what this mount knows of a directory it holds a read
// delegation on.
type dirState struct {
	d     *locking.Delegation
	ino   uint64
	owner *delegs // nil in tests of a state alone
	// used: when the state was last used (delegs.tick), for shedding the
	// least recently used (deleg_shed.go).
	used atomic.Uint64

	mu       lockorder.Mutex
	complete bool // names lists every entry
	names    map[string]dirEntry
	// changed counts this mount's own changes, so that a listing that
	// ran across one is not taken as complete.
	changed uint64
	// kernel: names the kernel has an entry for (positive or negative)
	// from an answer given under the delegation, and the kernel node of
	// the directory to invalidate them through.
	kernel map[string]bool
	node   KernelNode
	// attrTold: the kernel nodes whose attributes it was told under the
	// delegation, by inode.
	attrTold map[uint64]KernelNode
	// self: the directory's own attributes (its times and link count
	// change only with its entries, which the delegation covers), read
	// after the grant.
	self    store.Inode
	hasSelf bool
	// writes: this mount's writes of the directory's own document under
	// way (see deleg_self.go).
	writes selfWrites
	// misses counts the lookups it could not answer (walkahead.go).
	misses atomic.Int64
	// answering counts lookups between their check of the delegation and
	// their reply to the kernel; a recall waits for them before it
	// invalidates, so that no reply lands after the invalidation.
	answering atomic.Int64
	// moved: this state was copied under a write delegation (see
	// delegs.upgrade); nothing more may be told the kernel under it,
	// since its recall would not invalidate it.
	moved bool
}

// delegs is the mount's side of read delegations.
type delegs struct {
	f *Mount
	// maxDirs is maxDelegDirs (tests lower it).
	maxDirs int
	mu      lockorder.Mutex
	by      map[uint64]*dirState
	// asking: grants under way.
	asking map[uint64]bool
	// attrsIn: the directory whose state holds the attributes of an
	// inode. An index, not a second copy: the attributes are kept once,
	// in that state's entry (dirEntry.attr), and this says where to look
	// so that a change by inode (updateAttr, forgetAttr, unhold) finds
	// them without visiting every state. learnAttr and heldIn set it,
	// forgetAttr drops it. It may point at a state that no longer holds
	// them (recalled, or the entry replaced): every use checks the entry
	// it finds (its inode, attr), so a stale pointer costs a miss,
	// never a wrong answer.
	attrsIn map[uint64]uint64
	// upgradeTried: when an upgrade of a directory was last asked for.
	upgradeTried map[uint64]time.Time
	// tick orders uses of states (dirState.used); grown counts names
	// newly held, shedding is set while states are shed, held is what
	// they held when last summed (deleg_shed.go).
	tick     atomic.Uint64
	grown    atomic.Uint64
	shedding atomic.Bool
	held     atomic.Int64
}

func newDelegs(f *Mount) *delegs {
	return &delegs{f: f, by: map[uint64]*dirState{}, asking: map[uint64]bool{}, attrsIn: map[uint64]uint64{}, upgradeTried: map[uint64]time.Time{},
		maxDirs: maxDelegDirs}
}

func (ds *delegs) newDirState(d *locking.Delegation, node KernelNode) *dirState {
	st := &dirState{d: d, ino: d.Ino, owner: ds, names: map[string]dirEntry{}, kernel: map[string]bool{}, attrTold: map[uint64]KernelNode{}, node: node}
	st.used.Store(ds.tick.Add(1))
	return st
}

// delegable: attributes a (read in real time) that the delegation of
// directory dir may hold (see the package comment of this file): those of
// a file with one link that its inode records in dir. What a change of
// them recalls is decided by that record (store.Inode.HeldBy,
// FS.updateInodeFrom), so a file it does not name dir for (another
// directory, none recorded, several links) is read in real time here.
func delegable(a store.Inode, dir uint64) bool { return a.Type != store.TypeDir && a.HeldBy() == dir }

// learnAttr records the attributes of name, read in real time after the
// grant.
func (ds *delegs) learnAttr(st *dirState, name string, a store.Inode) {
	if !delegable(a, st.ino) {
		return
	}
	st.mu.Lock()
	e, ok := st.names[name]
	if ok && !e.absent && e.ino == a.Ino {
		e.attr = &a
		st.names[name] = e
	}
	st.mu.Unlock()
	if ok {
		ds.mu.Lock()
		ds.attrsIn[a.Ino] = st.ino
		ds.mu.Unlock()
	}
}

// heldIn records that the state of directory dir holds the attributes of
// inode ino (see attrsIn).
func (ds *delegs) heldIn(ino, dir uint64) {
	ds.mu.Lock()
	ds.attrsIn[ino] = dir
	ds.mu.Unlock()
}

// attr returns the attributes of inode ino, entry name of directory dir,
// if a delegation holds them; node is the entry's kernel node, told them.
func (ds *delegs) attr(dir uint64, name string, ino uint64, node KernelNode) (store.Inode, bool) {
	st := ds.state(dir)
	if st == nil {
		return store.Inode{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.names[name]
	if !ok || e.attr == nil || e.ino != ino || st.d.Revoked() {
		return store.Inode{}, false
	}
	if node != nil {
		st.attrTold[ino] = node
	}
	return *e.attr, true
}

// wrote records the attributes this mount just wrote for entry name of
// directory dir (a create): a file's with the directory's delegation, a
// directory's with its own.
func (ds *delegs) wrote(dir uint64, name string, a store.Inode) {
	if ds == nil {
		return
	}
	if a.Type == store.TypeDir {
		if st := ds.state(a.Ino); st != nil {
			st.learnSelf(a, 0) // only if nothing changed it since its birth
		}
		return
	}
	if st := ds.state(dir); st != nil {
		ds.learnAttr(st, name, a)
	}
}

// updateAttr replaces the attributes a delegation holds of inode ino by a,
// which this mount just made in memory (a pending inode, see
// writeback.go): nobody else can change them.
func (ds *delegs) updateAttr(ino uint64, a store.Inode) {
	if ds == nil {
		return
	}
	ds.mu.Lock()
	dir, ok := ds.attrsIn[ino]
	st := ds.by[dir]
	ds.mu.Unlock()
	if !ok || st == nil {
		return
	}
	st.mu.Lock()
	for name, e := range st.names {
		if e.ino == ino && e.attr != nil {
			e.attr = &a
			st.names[name] = e
		}
	}
	st.mu.Unlock()
}

// forgetAttr drops what a delegation holds of inode ino's attributes:
// this mount is changing them.
func (ds *delegs) forgetAttr(ino uint64) {
	if ds == nil {
		return
	}
	ds.mu.Lock()
	if own := ds.by[ino]; own != nil {
		own.mu.Lock()
		own.dropSelf()
		own.mu.Unlock()
	}
	dir, ok := ds.attrsIn[ino]
	delete(ds.attrsIn, ino)
	st := ds.by[dir]
	ds.mu.Unlock()
	if !ok || st == nil {
		return
	}
	st.mu.Lock()
	for name, e := range st.names {
		if e.ino == ino && e.attr != nil {
			e.attr = nil
			st.names[name] = e
		}
	}
	st.mu.Unlock()
}

// unhold is forgetAttr for attributes a delegation holds here that the
// store may not agree with (a file renamed in memory whose new directory
// is not known to be recorded, see writeback_rename.go): the kernel, which may have been
// told them to keep for long, is told to drop them too.
func (ds *delegs) unhold(inos []uint64) {
	if ds == nil || len(inos) == 0 {
		return
	}
	var told []KernelNode
	for _, ino := range inos {
		ds.mu.Lock()
		st := ds.by[ds.attrsIn[ino]]
		ds.mu.Unlock()
		ds.forgetAttr(ino)
		ds.f.cache.InvalidateInode(ino)
		if st == nil {
			continue
		}
		st.mu.Lock()
		if kn := st.attrTold[ino]; kn != nil {
			told = append(told, kn)
			delete(st.attrTold, ino)
		}
		st.mu.Unlock()
	}
	if len(told) == 0 || ds.f.closed.Load() {
		return
	}
	// As a recall does: never wait for the kernel long (see recall).
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, kn := range told {
			_ = kn.NotifyContent(-1, 0)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		ds.f.log.Warn("the kernel did not take attribute invalidations within 1s", "files", len(told))
	}
}

// stateAny returns the state of directory ino even if its delegation was
// revoked (a recall flushing it), or nil.
func (ds *delegs) stateAny(ino uint64) *dirState {
	if ds == nil {
		return nil
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.by[ino]
}

// state returns the valid state of directory ino, or nil.
func (ds *delegs) state(ino uint64) *dirState {
	if ds == nil {
		return nil
	}
	ds.mu.Lock()
	st := ds.by[ino]
	ds.mu.Unlock()
	if st == nil || st.d.Revoked() {
		return nil
	}
	st.used.Store(ds.tick.Add(1))
	ds.f.co.Delegations.Touch()
	return st
}

// want asks, in the background, for a read delegation on directory ino at
// path, unless one is held or asked for. node is its kernel node, if any.
func (ds *delegs) want(ino uint64, path string, node KernelNode) {
	if ds == nil {
		return
	}
	ds.mu.Lock()
	if st := ds.by[ino]; st != nil && !st.d.Revoked() || ds.asking[ino] || len(ds.by)+len(ds.asking) >= ds.maxDirs {
		ds.mu.Unlock()
		return
	}
	ds.asking[ino] = true
	ds.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ds.f.st.Timeout())
		defer cancel()
		ds.ask(ctx, ino, path, node)
	}()
}

// ask asks for a read delegation on directory ino at path (ds.asking
// holds it) and installs its state: the valid state of ino after the
// answer, or nil.
func (ds *delegs) ask(ctx context.Context, ino uint64, path string, node KernelNode) *dirState {
	d, err := ds.f.co.Delegations.Grant(ctx, ino, path, store.ReadDeleg)
	ds.mu.Lock()
	delete(ds.asking, ino)
	var st *dirState
	if err == nil && !d.Revoked() {
		st = ds.by[ino]
		if st == nil || st.d != d {
			st = ds.newDirState(d, node)
			ds.by[ino] = st
		}
	}
	ds.mu.Unlock()
	if st == nil || st.d.Revoked() {
		return nil
	}
	return st
}

// grantNow is want, waited for: the first listing of a directory asks for
// its delegation before it reads the entries (one round trip when nobody
// conflicts), so that it can hand the kernel the entries with attributes
// it may keep (readdirplus), instead of names whose every stat then costs
// a lookup of its own. It returns the state of ino, or nil when the
// delegation is refused (another mount writes or changes the directory,
// or it was recalled too often lately) or at the bound: the listing then
// goes on without one.
func (ds *delegs) grantNow(ctx context.Context, ino uint64, path string, node KernelNode) *dirState {
	if ds == nil {
		return nil
	}
	ds.mu.Lock()
	if st := ds.by[ino]; st != nil && !st.d.Revoked() {
		ds.mu.Unlock()
		return st
	}
	if len(ds.by)+len(ds.asking) >= ds.maxDirs {
		// A walk of a tree of more directories than the bound would go
		// on without delegations, every file then costing lookups of
		// its own: the one used least recently goes back instead.
		ds.mu.Unlock()
		if !ds.giveBackOldest(ctx) {
			return nil
		}
		ds.mu.Lock()
		if len(ds.by)+len(ds.asking) >= ds.maxDirs {
			ds.mu.Unlock()
			return nil
		}
	}
	// Counted as asking even when a background grant asks too: Grant
	// waits for that one and answers with its delegation.
	ds.asking[ino] = true
	ds.mu.Unlock()
	return ds.ask(ctx, ino, path, node)
}
