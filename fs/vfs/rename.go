package vfs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// RenameAt moves name of directory from, and for a directory its whole
// subtree, to newName of directory to: a new
// path, as one journaled operation under the strategy's locks (see
// locking.Journal): other mounts see either the old paths or the new ones.
// File data and attributes are keyed by inode and never move.
//
// Besides the strategy's locks it takes the change locks of both
// directories, and of the moved directory itself when it is one: its own
// attributes (ctime) change, and other mounts holding a delegation on it
// keep them, so they must be recalled first; so does a directory the
// rename replaces (it is gone). guess holds the caller's guesses at those
// directories' inodes (0: none); a wrong guess is found under the locks
// and the rename runs again with the right one. On success guess says
// what the rename did: the directory it moved and the one it replaced (0:
// none), whatever was guessed; the caller's kernel may have guessed a
// directory at the new name that another mount had moved away.
func (f *Mount) RenameAt(ctx context.Context, from Dir, name string, to Dir, newName string, guess *RenameDirs, noReplace bool) error {
	did, err := f.renameAt(ctx, from, name, to, newName, *guess, noReplace)
	if err == nil {
		*guess = did
	}
	return err
}

func (f *Mount) renameAt(ctx context.Context, from Dir, name string, to Dir, newName string, guess RenameDirs, noReplace bool) (RenameDirs, error) {
	if err := store.CheckName(name); err != nil {
		return RenameDirs{}, err
	}
	if err := store.CheckName(newName); err != nil {
		return RenameDirs{}, err
	}
	src, srcHold := f.holdOf(from.Ino())
	dst, dstHold := f.holdOf(to.Ino())
	if dstHold == holdWrite {
		if handled, err := f.renamePending(from, name, to, dst, newName, noReplace); handled {
			return RenameDirs{}, err // a file made in memory, moved there
		}
		if srcHold == holdWrite {
			if handled, err := f.renameStored(ctx, from, src, name, to, dst, newName, noReplace); handled {
				return RenameDirs{}, err // a stored file, moved in memory
			}
		}
	}
	if err := f.settle(ctx); err != nil {
		return RenameDirs{}, err
	}
	defer f.changing.begin(from.Ino(), to.Ino())()
	for attempt := 0; ; attempt++ {
		srcDir, ok1 := from.StorePath()
		dstDir, ok2 := to.StorePath()
		if !ok1 || !ok2 {
			return RenameDirs{}, syscall.ENOENT
		}
		src, dst := store.Join(srcDir, name), store.Join(dstDir, newName)
		if err := store.CheckPath(dst); err != nil {
			return RenameDirs{}, err
		}
		if store.IsWithin(dst, src) && src != dst {
			return RenameDirs{}, errnoErr(syscall.EINVAL, "cannot move %q into itself", src)
		}
		var subtree []string
		if f.co.Strategy.NeedsSubtree() {
			var err error
			if subtree, _, err = f.subtreePaths(ctx, src); err != nil {
				return RenameDirs{}, err
			}
		}
		reqs := append(f.co.Strategy.Rename(src, dst, subtree), locking.Change(from.Ino(), srcDir), locking.Change(to.Ino(), dstDir))
		if guess.Moved != 0 {
			reqs = append(reqs, locking.Change(guess.Moved, src))
		}
		if guess.Replaced != 0 {
			reqs = append(reqs, locking.Change(guess.Replaced, dst))
		}
		txn, err := f.beginRename(ctx, reqs, guess)
		if err != nil {
			return RenameDirs{}, err
		}
		// A rename of an ancestor here (which changes go-fuse's tree when it
		// replies) may have happened while we waited: then our locks are on
		// the old paths; take them again.
		moved := false
		if p, ok := from.StorePath(); !ok || p != srcDir {
			moved = true
		}
		if p, ok := to.StorePath(); !ok || p != dstDir {
			moved = true
		}
		var did RenameDirs
		if moved {
			err = errSubtreeGrew
		} else {
			did, err = f.renameLocked(ctx, txn, from, to, src, dst, &guess, noReplace, subtree)
		}
		if errors.Is(err, errSubtreeGrew) {
			_ = txn.End(ctx)
			if attempt < 20 {
				continue
			}
			return RenameDirs{}, errnoErr(syscall.EAGAIN, "rename of %q: the tree kept changing", src)
		}
		if rerr := txn.End(ctx); rerr != nil && err == nil {
			err = rerr
		}
		return did, err
	}
}

// beginRename takes the locks of a rename. A file's (as far as guess
// knows: a directory found under the locks makes the rename start again,
// guessed right) takes its shared locks (the directories', by the
// strategy, and their change locks) as this mount's lease on them, which
// its creates and other renames in those directories join at no cost,
// and only its exclusive locks (the two names) as its own: those
// documents are this rename's alone, and it writes them in one round
// trip, while every rename writing its holder into the directories'
// documents collides with every other in a busy directory. The lease is
// held until the rename has ended, its background finish included
// (locking.Txn.Then). Shared first, then exclusive, by every caller:
// nobody who holds an exclusive lock waits for a shared one.
func (f *Mount) beginRename(ctx context.Context, reqs []locking.Request, guess RenameDirs) (*locking.Txn, error) {
	if guess.Moved != 0 || guess.Replaced != 0 {
		return f.co.Begin(ctx, reqs)
	}
	var shared, own []locking.Request
	for _, r := range reqs {
		if r.Mode == store.Exclusive {
			own = append(own, r)
		} else {
			shared = append(shared, r)
		}
	}
	for attempt := 0; ; attempt++ {
		h, err := f.co.Share(ctx, shared)
		if err != nil {
			return nil, err
		}
		txn, err := f.co.Begin(ctx, own)
		if err != nil {
			h.End()
			return nil, err
		}
		if txn.Sess != h.Sess {
			// A new session began between the two: the lease is the old
			// one's, whose entries recovery removes.
			_ = txn.End(ctx)
			h.End()
			if attempt < 3 {
				continue
			}
			return nil, fmt.Errorf("rename: the session kept changing: %w", locking.ErrLeaseLost)
		}
		txn.Then(h.End)
		return txn, nil
	}
}

// RenameDirs are the directories whose own change locks a rename takes
// besides its parents': the one it moves and the one it replaces (0:
// none). A caller's are guesses (the kernel's, from its lookups of the
// source and the target): the rename checks them under its locks, and
// locks again when they were wrong.
type RenameDirs struct{ Moved, Replaced uint64 }

// errSubtreeGrew: what the rename planned for changed before or while it
// ran (it had no effect): plan and lock again.
var errSubtreeGrew = errors.New("subtree changed before its locks were granted")

// subtreePaths lists the paths below src, and which of them are
// directories (for the document strategy, which locks each of them).
func (f *Mount) subtreePaths(ctx context.Context, src string) ([]string, map[string]bool, error) {
	d, err := f.resolveFresh(ctx, src)
	if err != nil || d.Type != store.TypeDir {
		return nil, nil, nil // the locked re-check reports it
	}
	if err := f.st.Refresh(ctx, store.SearchedPaths); err != nil {
		return nil, nil, err
	}
	sc := f.st.ScanTree(src, store.DefaultPageSize)
	defer sc.Close()
	var out []string
	dirs := map[string]bool{}
	for {
		page, _, err := sc.Next(ctx)
		if err != nil {
			return nil, nil, err
		}
		if page == nil {
			sort.Strings(out)
			return out, dirs, nil
		}
		for _, d := range page {
			if d.Path != src {
				out = append(out, d.Path)
				if d.Type == store.TypeDir {
					dirs[d.Path] = true
				}
			}
		}
	}
}

// renameLocked is the rename under its locks; did: the directories it
// moved and replaced (0: none), once it is done.
func (f *Mount) renameLocked(ctx context.Context, txn *locking.Txn, from, to Dir, src, dst string, guess *RenameDirs, noReplace bool, subtree []string) (did RenameDirs, err error) {
	// Re-check everything with realtime reads now that nothing can change
	// (the source may have been moved away while we waited for the locks):
	// both directories, source and destination, in one mget.
	srcDir, _ := store.Split(src)
	dstDir, _ := store.Split(dst)
	res, err := f.co.View.GetMany(ctx, []string{srcDir, dstDir, src, dst})
	if err != nil {
		return RenameDirs{}, err
	}
	var docs [4]store.Dentry
	var found [4]bool
	for i, e := range res {
		docs[i], found[i] = e.Dentry, e.Found
	}
	for i, n := range []Dir{from, to} {
		switch {
		case !found[i]:
			return RenameDirs{}, errnoErr(syscall.ESTALE, "directory %q is gone", res[i].Path)
		case docs[i].Ino != n.Ino():
			return RenameDirs{}, errnoErr(syscall.ESTALE, "directory %q is now another inode", docs[i].Path)
		case docs[i].Type != store.TypeDir:
			return RenameDirs{}, syscall.ENOTDIR
		}
	}
	if !found[2] {
		return RenameDirs{}, fmt.Errorf("%q: %w", src, store.ErrNotFound)
	}
	s := docs[2]
	if src == dst {
		return RenameDirs{}, nil
	}
	if s.Type == store.TypeDir && s.Ino != guess.Moved {
		guess.Moved = s.Ino // not the directory whose change lock we hold
		return RenameDirs{}, errSubtreeGrew
	}
	if f.co.Strategy.NeedsSubtree() && s.Type == store.TypeDir {
		// Entries made between our listing and our grant are harmless if
		// they are files: every change to them needs their directory's
		// lock, which we hold exclusively. A new directory is not covered.
		_, dirs, err := f.subtreePaths(ctx, src)
		if err != nil {
			return RenameDirs{}, err
		}
		locked := map[string]bool{}
		for _, p := range subtree {
			locked[p] = true
		}
		for p := range dirs {
			if !locked[p] {
				return RenameDirs{}, errSubtreeGrew
			}
		}
	}
	var target *store.Dentry
	if found[3] {
		d := docs[3]
		if noReplace {
			return RenameDirs{}, syscall.EEXIST
		}
		if d.Ino == s.Ino {
			return RenameDirs{}, nil // two links to one inode: POSIX says do nothing
		}
		if d.Type == store.TypeDir && s.Type == store.TypeDir && d.Ino != guess.Replaced {
			guess.Replaced = d.Ino // not the directory whose change lock we hold
			return RenameDirs{}, errSubtreeGrew
		}
		switch {
		case s.Type == store.TypeDir && d.Type != store.TypeDir:
			return RenameDirs{}, syscall.ENOTDIR
		case s.Type != store.TypeDir && d.Type == store.TypeDir:
			return RenameDirs{}, syscall.EISDIR
		case d.Type == store.TypeDir && !f.knownEmpty(d.Ino):
			empty, err := f.isEmptyDir(ctx, dst)
			if err != nil {
				return RenameDirs{}, err
			}
			if !empty {
				return RenameDirs{}, syscall.ENOTEMPTY
			}
		}
		d.Intent = store.Intent{} // the visible state, at the stored version
		target = &d
	} else if res[3].Stored {
		// Garbage of an aborted or finished rename holds the name.
		if _, err := f.clearGarbage(ctx, dst); err != nil {
			return RenameDirs{}, err
		}
	}
	s.Intent = store.Intent{}

	if s.Type == store.TypeDir {
		// Every cached path below src is wrong now, and the cache cannot
		// enumerate them.
		defer f.cache.InvalidateAllPaths()
	}
	f.cache.InvalidatePath(src)
	f.cache.InvalidatePath(dst)
	f.noteWrite()
	defer f.noteWrite() // the finish phase writes too
	// The times ride with the bulk that ends the rename (best effort).
	t := now()
	times := []store.BulkOp{store.TouchInode(from.Ino(), t, t)}
	if to != from {
		times = append(times, store.TouchInode(to.Ino(), t, t))
	}
	defer func() {
		f.cache.InvalidateInode(from.Ino())
		f.cache.InvalidateInode(to.Ino())
		f.cache.InvalidateInode(s.Ino)
	}()
	_, srcName := store.Split(src)
	_, dstName := store.Split(dst)
	spec := locking.RenameSpec{Src: s, Dst: dst, Target: target, After: times, Ctime: t, SrcParent: from.Ino(), DstParent: to.Ino(),
		SrcAttr: f.knownInode(from.Ino(), srcName, s.Ino)}
	err = txn.Rename(ctx, spec)
	f.delegs.changedHere(from.Ino(), srcName, dirEntry{absent: true}, err == nil)
	f.delegs.changedHere(to.Ino(), dstName, dirEntry{ino: s.Ino, typ: s.Type}, err == nil)
	if err != nil {
		if errors.Is(err, locking.ErrRetry) {
			return RenameDirs{}, errSubtreeGrew // it had no effect: lock and run it again
		}
		if target == nil && errors.Is(err, store.ErrExists) && !errors.Is(err, locking.ErrLeaseLost) {
			// The name appeared after our check: a create under shared
			// locks (locking.Share) does not take the name's lock, and
			// Elasticsearch's create-if-absent refused our stage. The
			// rename was rolled back; do it again, now as a replacement.
			return RenameDirs{}, errSubtreeGrew
		}
		return RenameDirs{}, fmt.Errorf("rename %q to %q: %w", src, dst, err)
	}
	if s.Type == store.TypeDir {
		did.Moved = s.Ino
	}
	if target != nil && target.Type == store.TypeDir {
		did.Replaced = target.Ino
	}
	return did, nil
}

// knownInode is inode ino (name in directory dir) as this mount knows it
// at a version, from a delegation or the cache, or nil: a rename moves a
// file's Parents at that version without reading it first, when nobody
// changed it since (locking.RenameSpec.SrcAttr).
func (f *Mount) knownInode(dir uint64, name string, ino uint64) *store.Inode {
	a, ok := f.delegs.attr(dir, name, ino, nil)
	if !ok {
		a, ok = f.cache.Inode(ino)
	}
	if !ok || a.Ino != ino || !a.Ver.Known() {
		return nil
	}
	return &a
}
