package vfs

// A delegation's life after its grant: upgraded to a write delegation, its
// state moved to the new one, born with a directory made here, recalled
// by another mount; see deleg.go.

import (
	"context"
	"maps"
	"time"

	"github.com/esfs/esfs/locking"
)

// upgrade asks, in the background, for a write delegation on the
// directory of st, which this mount holds for reading and has just
// changed, when write delegations are on: a directory one mount works in
// alone is then changed in memory from its next call on, as one it made
// is. Another mount that looks in or changes it recalls it (its batch
// lands first); one that keeps doing so cools it (locking.Delegations).
func (ds *delegs) upgrade(st *dirState) {
	if ds.f.wb == nil || st.d.Writable() {
		return
	}
	ds.mu.Lock()
	if ds.asking[st.ino] || ds.by[st.ino] != st || time.Since(ds.upgradeTried[st.ino]) < upgradeEvery {
		ds.mu.Unlock()
		return
	}
	ds.asking[st.ino] = true
	if len(ds.upgradeTried) >= maxDelegDirs {
		clear(ds.upgradeTried)
	}
	ds.upgradeTried[st.ino] = time.Now()
	ds.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ds.f.st.Timeout())
		defer cancel()
		w, err := ds.f.co.Delegations.Upgrade(ctx, st.d, func(w *locking.Delegation) bool { return ds.move(st, w) })
		ds.mu.Lock()
		delete(ds.asking, st.ino)
		ds.mu.Unlock()
		if err != nil {
			ds.f.log.Debug("no write delegation for a directory changed here", "dir", st.d.Path, "err", err)
		} else if w != nil {
			ds.f.log.Debug("write delegation for a directory changed here", "dir", st.d.Path)
		}
	}()
}

// move makes a copy of st, under w, the state of its directory (see
// locking.Delegations.Upgrade, which calls it with its lock held): unless
// a change of its entries, or of its own document, is under way here,
// whose outcome would be recorded in st only. The kernel's names and
// attributes told under st go with the copy, to be invalidated when w is
// recalled, and nothing more is told under st.
func (ds *delegs) move(st *dirState, w *locking.Delegation) bool {
	if ds.f.changing.busy(st.ino) {
		return false
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.by[st.ino] != st {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writes.pending != 0 || st.moved || st.answering.Load() != 0 {
		return false
	}
	n := ds.newDirState(w, st.node)
	n.complete, n.changed = st.complete, st.changed
	n.names, n.kernel, n.attrTold = maps.Clone(st.names), maps.Clone(st.kernel), maps.Clone(st.attrTold)
	n.self, n.hasSelf = st.self, st.hasSelf
	st.moved = true
	ds.by[st.ino] = n
	return true
}

// born records that directory ino was just made here, empty, under a
// delegation granted with it.
func (ds *delegs) born(d *locking.Delegation) {
	if ds == nil || d == nil {
		return
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	st := ds.newDirState(d, nil)
	st.complete = true
	ds.by[d.Ino] = st
}

// recall is the delegation's Recall callback: the state goes, and so do
// the kernel's entries of the names it was told about.
func (ds *delegs) recall(ctx context.Context, d *locking.Delegation) {
	if d.Writable() {
		// What this mount made in memory lands before anyone reads or
		// changes the directory.
		ds.f.settleForRecall(ctx, d)
	}
	ds.mu.Lock()
	st := ds.by[d.Ino]
	if st != nil && st.d == d {
		delete(ds.by, d.Ino)
	} else {
		st = nil
	}
	ds.mu.Unlock()
	if st == nil {
		return
	}
	// Lookups that checked the delegation before it was revoked may still
	// be replying: wait for them (they do not wait for anything of ours),
	// and a moment more for go-fuse to write the reply of the last one.
	for i := 0; st.answering.Load() > 0 && i < 1000; i++ {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Millisecond)
	st.mu.Lock()
	names := make([]string, 0, len(st.kernel))
	for n := range st.kernel {
		names = append(names, n)
	}
	kn := st.node
	// The daemon's inode cache may hold attributes of the entries read
	// under the delegation (xattrs and symlink targets are read from it):
	// they change once the delegation is gone.
	for _, e := range st.names {
		if e.ino != 0 {
			ds.f.cache.InvalidateInode(e.ino)
		}
	}
	attrNodes := make([]KernelNode, 0, len(st.attrTold))
	for _, c := range st.attrTold {
		attrNodes = append(attrNodes, c)
	}
	st.mu.Unlock()
	if len(attrNodes) > 0 && !ds.f.closed.Load() {
		// Attributes: the kernel discards a reply older than the
		// invalidation, so no wait is needed for these.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, c := range attrNodes {
				_ = c.NotifyContent(-1, 0)
			}
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
			ds.f.log.Warn("the kernel did not take a recalled directory's attribute invalidations within 1s", "dir", d.Path)
		}
	}
	// What was read under the delegation went to the path cache too,
	// where it would outlive the delegation by the cache's TTL; so did
	// what this mount's own operations read of the directory. The cache
	// cannot enumerate a directory's paths, and recalls are rare where
	// the cache helps: forget every path.
	ds.f.cache.InvalidateAllPaths()
	if kn == nil || ds.f.closed.Load() {
		return
	}
	// The kernel may make a notification wait for the directory's lock,
	// held by a request of this very mount that could be waiting for
	// another mount: never wait for it long. The notifications still go
	// in once that request ends; until then this mount's kernel may answer
	// from the entries it has (they were given for --entry-timeout, an
	// hour by default under delegations).
	notified := make(chan struct{})
	stopCrash := locking.CrashPointAfter("recall-invalidations-held", time.Second)
	go func() {
		defer close(notified)
		defer stopCrash()
		for _, n := range names {
			// Expired, not dropped: the kernel asks again before it
			// uses the name, and a directory in it that is a working
			// directory stays one (KernelNode.ExpireEntry). ENOENT: the
			// kernel had already dropped it. Other errors (ENOTCONN:
			// unmounted) leave nothing to invalidate either.
			_ = kn.ExpireEntry(n)
		}
	}()
	select {
	case <-notified:
	case <-time.After(time.Second):
		ds.f.log.Warn("the kernel did not take a recalled directory's invalidations within 1s; they go in once its request in the directory ends", "dir", d.Path)
	case <-ctx.Done():
	}
}
