package vfs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/esfs/esfs/store"
)

// LinkAt makes name in directory parent a new link to inode ino (not a
// directory's: the caller checks): the inode's link count first, then the
// path document with create-if-absent.
func (f *Mount) LinkAt(ctx context.Context, parent Dir, name string, ino uint64) (store.Node, error) {
	if err := store.CheckName(name); err != nil {
		return store.Node{}, err
	}
	if f.opts.ReadOnly {
		return store.Node{}, f.readOnlyRefusal(ctx, parent, name)
	}
	defer f.changing.begin(parent.Ino())()
	dir, path, txn, err := f.lockEntry(ctx, parent, name)
	if err != nil {
		return store.Node{}, err
	}
	sn, err := f.linkLocked(ctx, parent, ino, dir, path)
	f.end(ctx, txn, &err)
	f.delegs.changedHere(parent.Ino(), name, dirEntry{ino: sn.Ino, typ: sn.Type}, err == nil)
	return sn, err
}

func (f *Mount) linkLocked(ctx context.Context, parent Dir, ino uint64, dir, path string) (store.Node, error) {
	if err := f.checkDirAt(ctx, parent.Ino(), dir, true); err != nil {
		return store.Node{}, err
	}
	// Count the link first: a crash in between leaves a count one too high
	// (a leak fsck reclaims), never a path to an inode that thinks it has
	// no links and may be deleted.
	t := now()
	count := func(a *store.Inode) error {
		if a.Nlink >= store.MaxLinks {
			return syscall.EMLINK
		}
		*a = a.Linked(parent.Ino())
		a.Ctime = t
		return nil
	}
	a, err := f.updateInode(ctx, ino, count)
	if errors.Is(err, store.ErrUnavailable) {
		a, err = f.settleLinkCount(ctx, ino, t, count, err)
	}
	if err != nil {
		return store.Node{}, err
	}
	d := store.Dentry{Path: path, Ino: a.Ino, Type: a.Type}
	f.cache.InvalidatePath(path)
	f.noteWrite()
	v, err := f.createLinkName(ctx, d)
	if errors.Is(err, store.ErrExists) {
		if cleared, cerr := f.clearGarbage(ctx, path); cerr == nil && cleared {
			v, err = f.createLinkName(ctx, d)
		}
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		// The name may still be made by a try held on its way: the count
		// stays, one too high if it never is (a leak fsck --repair
		// counts), never one too low for a name that is there.
		f.log.Warn("a link's name may still land; its inode keeps the count", "path", path, "ino", a.Ino, "err", err)
		return store.Node{}, err
	case err != nil:
		if _, uerr := f.updateInode(ctx, a.Ino, func(a *store.Inode) error { *a = a.Unlinked(parent.Ino()); return nil }); uerr != nil {
			f.log.Warn("could not undo a link count", "ino", a.Ino, "err", uerr)
		}
		return store.Node{}, err
	}
	f.touchDir(parent.Ino(), t)
	d.Ver = v
	d.Parent, d.Name = store.Split(path)
	sn := store.Node{Dentry: d, Attr: a}
	f.cache.PutNode(sn, f.cache.Gen())
	return sn, nil
}

// createLinkName makes the path document d of a new link with
// create-if-absent, under the caller's exclusive lock on the name. A try
// whose outcome is unknown (its answer lost, refused, held) is made
// again: the name then found, naming d's inode, is the earlier try's,
// landed. Before, a link whose name landed with its answer lost took its
// count back and answered EIO: two names, one link counted, and removing
// either name deleted the file under the other. Whatever the tries end
// in, it is answered once those of unknown outcome can no longer land
// (see remakeNew): else an unlink of the name right after is undone by
// one of them, a name the count does not know of.
func (f *Mount) createLinkName(ctx context.Context, d store.Dentry) (store.Version, error) {
	sent := time.Now()
	v, err := f.st.Write(ctx, store.CreateDentry(d))
	if !errors.Is(err, store.ErrUnavailable) {
		return v, err
	}
	for try := 0; try < 3; try++ {
		again := time.Now()
		v, err = f.st.Write(ctx, store.CreateDentry(d))
		if errors.Is(err, store.ErrUnavailable) {
			sent = again
			continue
		}
		if errors.Is(err, store.ErrExists) {
			cur, gerr := f.st.GetDentry(ctx, d.Path)
			if gerr == nil && cur.Ino == d.Ino && cur.Intent.Op == "" {
				v, err = cur.Ver, nil
			}
		}
		f.outliveTries(sent)
		return v, err
	}
	return v, err
}

// settleLinkCount settles a link's count whose write met an unknown
// outcome (first): a fresh read tells whether it landed (the inode's ctime
// is this link's, t, to the nanosecond), and if it did not, the count is
// written again, once, which also keeps the first write from landing
// later (it is conditional on the version this one moves). Else a link
// answered EIO having counted itself, its name never made: the inode's
// count one too high on every mount (campaign seed 712164965).
func (f *Mount) settleLinkCount(ctx context.Context, ino uint64, t int64, count func(*store.Inode) error, first error) (store.Inode, error) {
	cur, err := f.freshInode(ctx, ino)
	if err != nil {
		return store.Inode{}, first
	}
	if cur.Ctime == t {
		return cur, nil
	}
	// The first may still land before this one reads: counted once.
	errLanded := errors.New("the first write of the count landed")
	a, err := f.updateInode(ctx, ino, func(a *store.Inode) error {
		if a.Ctime == t {
			return errLanded
		}
		return count(a)
	})
	if errors.Is(err, errLanded) {
		return f.freshInode(ctx, ino)
	}
	return a, err
}

// touchDir sets a directory's mtime and ctime after a change of its
// entries, with a partial update (no read, no conflict with siblings). It
// is synchronous: a later explicit utimens (rsync, tar) must win over it.
func (f *Mount) touchDir(ino uint64, t int64) {
	f.cache.InvalidateInode(ino)
	ctx, cancel := context.WithTimeout(context.Background(), f.st.Timeout())
	defer cancel()
	res, err := f.st.Bulk(ctx, []store.BulkOp{store.TouchInode(ino, t, t)})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		f.log.Warn("could not update directory times", "ino", ino, "err", err)
	}
}
