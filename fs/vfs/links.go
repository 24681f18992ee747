package vfs

import (
	"context"
	"errors"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// A directory's link count is 2 plus its subdirectories, as on a local
// filesystem. It lives in the directory's inode document, and every entry
// change that adds or removes a subdirectory changes it with a
// compare-and-set riding in the same bulk as the entry (dirLinksOp), at the
// version this mount already has: no round trip of its own unless another
// change of the directory came in between, when it is redone as a
// read-modify-write (settleDirLinks). File creates do not take part: they
// only set the directory's times with a partial update, so that creates in
// one directory never contend on it. A crash between the entry and its
// count leaves the count one off, which esfs fsck finds and repairs.
// Renames move counts between directories in the journal (locking).
//
// A file's count is in its inode document too. Removing a name drops one
// link (locking.DropLink, which the journal also uses for the inode a
// rename replaced, in any session); the inode and its data go with the
// last link, unless this mount has the file open: then they go at the
// last close.

// parentLinks is a change of a directory's count and times that rides in
// the bulk of an entry change.
type parentLinks struct {
	ino     uint64
	delta   int
	t       int64
	counted bool        // the bulk item is a compare-and-set of the count
	after   store.Inode // the directory as that item writes it
	gen     uint64      // cache generation when the item was made
	// self: the directory's delegation, following the write (writingSelf).
	self *dirState
}

// dirLinksOp returns the bulk item that adds delta links to directory ino
// and sets its mtime and ctime to t: a compare-and-set at the version its
// delegation holds or in this mount's cache (or read now), or, for a delta
// of 0 or a directory whose count is not kept, the partial update of its
// times. Once it is made, settleDirLinks must follow, even when the bulk
// failed as a whole.
func (f *Mount) dirLinksOp(ctx context.Context, ino uint64, delta int, t int64) (store.BulkOp, parentLinks, error) {
	pl := parentLinks{ino: ino, delta: delta, t: t}
	if delta != 0 {
		dir, err := f.dirAttrs(ctx, ino)
		if err != nil {
			return store.BulkOp{}, pl, err
		}
		if dir.DirLinksCounted() && dir.Ver.Known() {
			pl.after, _ = store.WithDirLinks(dir, delta, t)
			op := store.PutInode(pl.after, dir.Ver)
			if err := op.Err(); err != nil {
				return store.BulkOp{}, pl, err
			}
			pl.counted = true
			f.cache.InvalidateInode(ino)
			pl.gen = f.cache.Gen()
			pl.self = f.delegs.writingSelf(ino)
			return op, pl, nil
		}
	}
	f.cache.InvalidateInode(ino)
	pl.self = f.delegs.writingSelf(ino)
	return store.TouchInode(ino, t, t), pl, nil
}

// dirAttrs returns directory ino's attributes: its own, if its delegation
// holds them (exactly as stored), else from the cache or the store.
func (f *Mount) dirAttrs(ctx context.Context, ino uint64) (store.Inode, error) {
	if a, ok := f.delegs.selfAttr(ino, nil); ok {
		return a, nil
	}
	return f.inode(ctx, ino, f.cache.Gen())
}

// settleDirLinks finishes what dirLinksOp began, given the bulk item's
// result and whether the entry change it rode with took effect: a count
// that landed for an entry change that did not is taken back, one that
// lost its compare-and-set is done again with a fresh read.
func (f *Mount) settleDirLinks(ctx context.Context, pl parentLinks, res store.BulkResult, applied bool) {
	// The directory's delegation holds its attributes on where the write
	// leaves them exactly known: the document a compare-and-set wrote,
	// or the times a partial update set (whether or not the entry change
	// took effect). Anything else is redone or undone below by a
	// read-modify-write, which drops them.
	out := selfWrite{known: res.Err == nil && (!pl.counted || applied), times: pl.t, ver: res.Ver}
	if pl.counted && out.known {
		after := pl.after
		after.Ver = res.Ver
		out.full = &after
	}
	f.delegs.wroteSelf(pl.ino, pl.self, out)
	switch {
	case !pl.counted:
		if applied && res.Err != nil {
			f.log.Warn("could not update directory times", "ino", pl.ino, "err", res.Err)
		}
	case applied && res.Err == nil:
		// Cached unless another change of the directory began since,
		// which may have landed after ours.
		pl.after.Ver = res.Ver
		f.cache.PutInode(pl.after, pl.gen)
	case applied && errors.Is(res.Err, store.ErrConflict):
		f.addDirLinks(ctx, pl.ino, pl.delta, pl.t)
	case applied && errors.Is(res.Err, store.ErrUnavailable):
		// Its outcome unknown (refused, its answer lost, held) for an
		// entry change that took effect (a create settled by
		// remakeNew): the directory read again names its last count
		// changes, which tells whether this one landed, whatever else
		// changed it meanwhile (another mount's create in it: campaign
		// seed 814943796); made again if not.
		f.addDirLinks(ctx, pl.ino, pl.delta, pl.t, pl.after)
	case applied:
		f.log.Warn("a directory's link count may be one off (esfs fsck --repair counts it)", "ino", pl.ino, "err", res.Err)
	case res.Err == nil:
		f.addDirLinks(ctx, pl.ino, -pl.delta, 0)
	}
}

// addDirLinks is the read-modify-write of a directory's count (and times,
// when t is not 0), given the writes of this change already made whose
// outcome is unknown (store.AddDirLinks settles them). A failure is
// logged: the count is then one off until fsck repairs it, which is no
// reason to fail the entry change that already happened.
func (f *Mount) addDirLinks(ctx context.Context, ino uint64, delta int, t int64, unknown ...store.Inode) {
	f.cache.InvalidateInode(ino)
	gen := f.cache.Gen()
	n, err := f.st.AddDirLinks(ctx, ino, delta, t, unknown...)
	f.delegs.forgetAttr(ino)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		f.log.Warn("a directory's link count may be one off (esfs fsck --repair counts it)", "ino", ino, "delta", delta, "err", err)
		return
	}
	if err == nil {
		f.cache.PutInode(n, gen)
	}
}

// dropLink removes one link from ino, its name in directory dir gone (an
// unlink, or a rename that replaced it; dir 0: not known), and deletes
// the inode and its data when none is left, unless this mount still has
// it open (then the last close deletes it).
func (f *Mount) dropLink(ctx context.Context, ino, dir uint64) error {
	// The cached inode, if any, is tried at its version first: right, it
	// saves a read; stale, its compare-and-set fails and DropLink reads.
	known, _ := f.cache.Inode(ino)
	known.Ino = ino
	f.cache.InvalidateInode(ino)
	f.delegs.forgetAttr(ino)
	a, err := locking.DropLinkFrom(ctx, f.st, known, dir, f.keepUnlinked)
	if err == nil && a.Ino != 0 {
		f.cache.PutInode(a, f.cache.Gen())
	} else {
		f.cache.InvalidateInode(ino)
	}
	return err
}

// dropLinkAndEnd drops the link of inode ino, whose name in directory dir
// the caller has just removed under txn, and ends txn. An inode known from
// the cache to go with this link (its last link, or a directory), and not
// open here, is deleted in the release's bulk at the cached version: no
// round trip of its own. That needs no path lock (the name is gone, and inodes are changed
// by compare-and-set); a stale cached version fails, and the link is then
// dropped the long way, which reads the inode.
//
// The name is gone whatever happens here, so the call has happened: a
// link drop that fails (the cluster unavailable for a moment) is retried
// in the background instead of failing it, which would tell the caller
// the name is still there. Only the release's own error is returned
// (someone judged this mount dead: EIO, as for any operation).
func (f *Mount) dropLinkAndEnd(ctx context.Context, txn *locking.Txn, ino, dir uint64) error {
	known, ok := f.cache.Inode(ino)
	if !ok || !known.Ver.Known() || (known.Nlink > 1 && known.Type != store.TypeDir) || f.openState(ino) != nil {
		f.dropLinkOrRetry(ctx, ino, dir)
		var err error
		f.end(ctx, txn, &err)
		return err
	}
	f.cache.InvalidateInode(ino)
	f.delegs.forgetAttr(ino)
	res, err := txn.EndWith(ctx, []store.BulkOp{store.DeleteInode(ino, known.Ver)})
	switch {
	case res != nil && res[0].Err == nil:
		if derr := locking.DeleteData(ctx, f.st, known); derr != nil {
			// Leftover chunks of a deleted inode: fsck --repair
			// removes them once this mount has ended.
			f.log.Warn("deleting the data of an unlinked file failed", "ino", ino, "err", derr)
		}
	case res != nil && errors.Is(res[0].Err, store.ErrNotFound):
		// Someone else's drop came first.
	default:
		// A stale version, or an unknown outcome: the long way reads.
		f.dropLinkOrRetry(ctx, ino, dir)
	}
	return err
}

// dropLinkOrRetry drops a link of inode ino whose name is already gone;
// if that fails it keeps trying in the background, with backoff, for a
// few leases (an inode still left then is unreachable: fsck --repair
// removes it).
func (f *Mount) dropLinkOrRetry(ctx context.Context, ino, dir uint64) {
	err := f.dropLink(ctx, ino, dir)
	if err == nil {
		return
	}
	if errors.Is(err, locking.ErrDropUnknown) {
		// It may have landed: once more could take a link the file still
		// has under another name. A count one too high is fsck's.
		f.log.Warn("the drop of a removed name's link may or may not have landed; its count may be one high (esfs fsck --repair counts it)", "ino", ino, "err", err)
		return
	}
	f.log.Warn("dropping the link of a removed name failed; retrying in the background", "ino", ino, "err", err)
	go func() {
		lease := f.co.Session().Lease()
		deadline := time.Now().Add(3 * lease)
		for attempt := 0; time.Now().Before(deadline) && !f.closed.Load(); attempt++ {
			time.Sleep(min(time.Duration(attempt+1)*200*time.Millisecond, lease/2))
			ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), lease)
			err = f.dropLink(ctx, ino, dir)
			cancel()
			if errors.Is(err, locking.ErrDropUnknown) {
				f.log.Warn("the drop of a removed name's link may or may not have landed; its count may be one high (esfs fsck --repair counts it)", "ino", ino, "err", err)
				return
			}
			if err == nil {
				f.log.Info("dropped the link of a removed name after all", "ino", ino, "attempts", attempt+2)
				return
			}
		}
		f.log.Warn("gave up dropping the link of a removed name; esfs fsck --repair removes the inode", "ino", ino, "err", err)
	}()
}

// dropReplacedLink is the journal's drop of the link of an inode a rename
// finished by this mount replaced (or a batch removed): as unlink's, kept
// while open here, and tried again in the background when the cluster
// refuses it, since the rename's record says the drop is done once it
// starts (a drop that failed once left the inode unreachable, campaign
// seed 868956585).
func (f *Mount) dropReplacedLink(ctx context.Context, ino, dir uint64) error {
	f.dropLinkOrRetry(ctx, ino, dir)
	return nil
}

// keepUnlinked decides whether an inode whose last link is gone must
// outlive it because this mount has it open, and marks it for deletion at
// the last close: it returns this mount's session, the inode's keeper
// (store.Inode.Keeper), or "" to let it go.
func (f *Mount) keepUnlinked(a store.Inode) string {
	of := f.openState(a.Ino)
	a.Keeper = f.co.Session().ID()
	if of == nil || !of.markUnlinked(a) {
		return ""
	}
	return a.Keeper
}

// deleteInode removes an inode with no links left, and its data.
func (f *Mount) deleteInode(ctx context.Context, a store.Inode) error {
	f.cache.InvalidateInode(a.Ino)
	f.clean.drop(a.Ino)
	return locking.DeleteUnlinked(ctx, f.st, a)
}
