package vfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
)

// The lookup of a name in a directory, decided once from what the mount
// holds of the directory: with delegations off, the daemon's cache or the
// store; with them, the directory's delegation (its names, then a read
// under it that it keeps true), or, when none covers it, a read in real
// time that nothing keeps.

// LookupAnswer is what a lookup found, and what the kernel may keep of it.
type LookupAnswer struct {
	Node store.Node // the entry found (the lookup's error says none)
	// Kept: the answer, found or not, is told under the directory's
	// delegation, whose recall makes the kernel forget it: the kernel
	// may keep it for its timeout. Without delegations the mount's
	// timeouts apply, whatever this says.
	Kept bool
	// UnderDelegation: the entry found was read under the directory's
	// delegation; its attributes are to be told under the delegation
	// that holds them (TellAttrs) once the kernel's node is made.
	UnderDelegation bool
	// Done ends the answer once the reply is made: a recall waits for the
	// answers told under the delegation to end (dirState.told).
	Done func()
}

func noDone() {}

// dirPath returns the path of directory d, and checks with a store read
// that the path still names d's inode (fresh: bypassing the cache).
// Another mount may have renamed the directory away and made a new one at
// its name; then operations on d (stale) get ESTALE instead of landing in
// the other directory.
func (f *Mount) dirPath(ctx context.Context, d Dir, fresh bool) (string, error) {
	p, ok := d.StorePath()
	if !ok {
		return "", errnoErr(syscall.ENOENT, "directory inode %d was removed", d.Ino())
	}
	return p, f.checkDirAt(ctx, d.Ino(), p, fresh)
}

// LookupAt looks name up in directory d, whose kernel node is kn. The
// caller calls the answer's done once it has replied, also on an error.
func (f *Mount) LookupAt(ctx context.Context, d Dir, kn KernelNode, name string) (LookupAnswer, error) {
	st := f.delegs.state(d.Ino())
	if st != nil {
		// A directory being read ahead knows its names and their
		// attributes once that read ends: waiting for it costs less
		// than reading them one by one meanwhile.
		f.awaitAhead(ctx, d.Ino())
		if ans, err, ok := f.lookupDelegated(ctx, d, kn, st, name); ok {
			return ans, err
		}
	} else if f.delegs == nil {
		if sn, err, ok := f.lookupCached(d, name); ok {
			return LookupAnswer{Node: sn, Done: noDone}, err
		}
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	none := LookupAnswer{Done: noDone}
	if err := store.CheckName(name); err != nil {
		return none, err
	}
	dir, err := f.dirPath(ctx, d, false)
	if err != nil {
		return none, err
	}
	path := store.Join(dir, name)
	if len(path) > store.MaxPath {
		return none, syscall.ENAMETOOLONG
	}
	if st == nil && f.delegs == nil {
		var sn store.Node
		if f.opts.ReadOnly {
			sn, err = f.resolveReadOnly(ctx, d.Ino(), dir, path)
		} else {
			sn, err = f.resolve(ctx, path)
		}
		return LookupAnswer{Node: sn, Done: noDone}, err
	}
	if st == nil {
		// With delegations, what no delegation covers is read in real
		// time and not Kept: nothing would tell us when it changes.
		f.delegs.want(d.Ino(), dir, kn)
		if err := f.settleDir(ctx, d.Ino()); err != nil {
			return none, err
		}
		sn, recalled, err := f.resolveWatching(ctx, d.Ino(), dir, path)
		if recalled && err == nil {
			// Another mount was writing here: now that it flushed, look
			// again; what was read before the recall is not kept either.
			ans, err := f.LookupAt(ctx, d, kn, name)
			ans.Kept = false
			return ans, err
		}
		return LookupAnswer{Node: sn, Done: noDone}, err
	}
	// Under the delegation, and read in real time after its grant: what
	// this read finds stays true until a recall.
	sn, err := f.resolveFresh(ctx, path)
	switch {
	case errors.Is(err, store.ErrNotFound):
		st.learn(name, dirEntry{absent: true})
	case err == nil:
		// Only names found count: the lookups of creates (new names)
		// in a directory shared with other mounts would read it whole
		// again at every grant.
		f.missed(st, dir)
		st.learn(name, dirEntry{ino: sn.Ino, typ: sn.Type})
		f.delegs.learnAttr(st, name, sn.Attr) // read now (resolveFresh)
	}
	ans := LookupAnswer{Node: sn, UnderDelegation: err == nil, Done: noDone}
	if st.told(name, kn) {
		// Told under the delegation: kept, and the recall waits for the
		// reply. If it was revoked meanwhile, the answer may be
		// overtaken by the change that recalled it, and is not kept.
		ans.Kept, ans.Done = true, st.done
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		ans.Kept = false
	}
	return ans, err
}

// lookupDelegated answers a lookup from what the directory's delegation
// knows (ok false: it knows nothing of name). Attributes come from the
// delegation that holds them (the directory's for a file, a
// subdirectory's own), else from the store, read now.
func (f *Mount) lookupDelegated(ctx context.Context, d Dir, kn KernelNode, st *dirState, name string) (ans LookupAnswer, err error, ok bool) {
	e, ok := st.lookup(name)
	if !ok || !st.told(name, kn) {
		return LookupAnswer{}, nil, false
	}
	if e.absent {
		return LookupAnswer{Kept: true, Done: st.done}, syscall.ENOENT, true
	}
	ds := f.delegs
	var a store.Inode
	covered := e.attr != nil
	if covered {
		a = *e.attr
	}
	var sub *dirState // the entry's own delegation, for a directory
	var changes uint64
	if e.typ == store.TypeDir {
		a, covered = f.wb.overlay(e.ino, func() (store.Inode, bool) { return ds.selfAttr(e.ino, nil) })
		if sub = ds.state(e.ino); sub != nil {
			changes = sub.changeCount()
		}
	}
	if !covered {
		ctx, cancel := f.ctxOf(ctx)
		defer cancel()
		var err error
		path := "" // for display only: a recall is by inode
		if dir, ok := d.StorePath(); ok {
			path = store.Join(dir, name)
		}
		if a, err = f.inodeNow(ctx, e.ino, e.typ, path); err != nil {
			st.done()
			return LookupAnswer{}, nil, false // let the ordinary lookup find out
		}
		ds.learnAttr(st, name, a)
		if sub != nil {
			sub.learnSelf(a, changes)
		}
	}
	if a.Type != e.typ {
		st.done()
		return LookupAnswer{}, nil, false
	}
	sn := store.Node{Dentry: store.Dentry{Ino: e.ino, Type: e.typ, Name: name}, Attr: a}
	return LookupAnswer{Node: sn, Kept: true, UnderDelegation: true, Done: st.done}, nil, true
}

// lookupCached answers a lookup from the daemon's cache alone, when both
// directory d's path and the name are cached (ok false: go to the store).
// It makes the same checks as the full lookup, against the cache; it
// exists because most lookups are such hits, and the full path's deadline
// timer costs as much as the hit itself.
func (f *Mount) lookupCached(d Dir, name string) (sn store.Node, err error, ok bool) {
	if store.CheckName(name) != nil {
		return store.Node{}, nil, false
	}
	dir, ok := d.StorePath()
	if !ok {
		return store.Node{}, nil, false
	}
	if dir != "/" {
		dd, neg, ok := f.cache.Lookup(dir)
		if !ok || neg || dd.Ino != d.Ino() || dd.Type != store.TypeDir {
			return store.Node{}, nil, false
		}
	}
	path := store.Join(dir, name)
	if len(path) > store.MaxPath {
		return store.Node{}, nil, false
	}
	sn, neg, ok := f.cache.Lookup(path)
	switch {
	case !ok:
		return store.Node{}, nil, false
	case neg && f.opts.ReadOnly:
		return store.Node{}, nil, false // see resolveReadOnly
	case neg:
		return store.Node{}, syscall.ENOENT, true
	}
	return sn, nil, true
}
