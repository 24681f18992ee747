// What a finished rename does to link counts: directories gain or lose
// the link of a subdirectory moved or replaced, and the inode it replaced
// loses the link of its name, once per rename, whoever finishes it. The
// link drop is the store-level one that unlink uses too, so that any
// session, a mount or an admin command, can do it.

package locking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/esfs/esfs/store"
)

// dirLinkDeltas is what a rename does to directories' link counts: a
// directory moved to another parent takes one link (its "..") from the
// old parent to the new one, and a replaced directory takes one from the
// destination's parent.
func dirLinkDeltas(rec store.OpRecord) map[uint64]int {
	out := map[uint64]int{}
	if rec.SrcType == store.TypeDir && rec.SrcParent != 0 && rec.DstParent != 0 && rec.SrcParent != rec.DstParent {
		out[rec.SrcParent]--
		out[rec.DstParent]++
	}
	if rec.Overwritten != 0 && rec.OverwrittenType == store.TypeDir && rec.DstParent != 0 {
		out[rec.DstParent]--
	}
	for ino, d := range out {
		if d == 0 {
			delete(out, ino)
		}
	}
	return out
}

// moveDirLinks applies link count changes to directories, each a
// read-modify-write of its own, all at once. A failure is logged: the
// count is then off, for fsck to repair, but the rename has happened.
func (j *Journal) moveDirLinks(ctx context.Context, deltas map[uint64]int) {
	var wg sync.WaitGroup
	for ino, d := range deltas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.b.AddDirLinks(ctx, ino, d, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
				j.log.Warn("could not move a directory link count of a rename (esfs fsck --repair counts it)", "ino", ino, "delta", d, "err", err)
			}
		}()
	}
	wg.Wait()
}

// dropLinks drops one link of each of inos (the names a batch removed), in
// two round trips for all of them: one read, then one bulk that deletes
// the inodes left without links, with their data when it is a few chunks,
// and writes the others' counts, each at the version read. What that
// cannot settle (a version changed meanwhile, a large file) goes through
// the session's dropLink one by one. A failure is logged: fsck reclaims an
// inode left without names.
func (j *Journal) dropLinks(ctx context.Context, inos []uint64) {
	j.mu.Lock()
	dropLink := j.dropLink
	j.mu.Unlock()
	one := func(ino uint64) {
		if err := dropLink(ctx, ino, 0); err != nil {
			j.log.Warn("could not drop the link of a removed name (fsck reclaims the inode)", "ino", ino, "err", err)
		}
	}
	res, err := j.b.GetInodes(ctx, inos)
	if err != nil {
		for _, ino := range inos {
			one(ino)
		}
		return
	}
	t := time.Now().UnixNano()
	var ops []store.BulkOp
	var opIno []uint64 // the inode of each op, 0 for a chunk's
	var slow []uint64
	cs := j.b.ChunkSize()
	for i, r := range res {
		if errors.Is(r.Err, store.ErrNotFound) {
			continue // dropped already
		}
		a := r.Inode
		if r.Err != nil || !a.Ver.Known() {
			slow = append(slow, inos[i])
			continue
		}
		if a.Nlink > 1 && a.Type != store.TypeDir {
			// Its directory is not recorded with the batch: the others
			// are forgotten too (store.Inode.Unlinked), which a batch
			// rarely meets (it removes files with one link).
			b := a.Unlinked(0)
			b.Ctime = t
			ops, opIno = append(ops, store.PutInode(b, a.Ver)), append(opIno, a.Ino)
			continue
		}
		chunks := int64(0)
		if a.Type == store.TypeFile && a.Size > 0 {
			chunks = (a.Size-1)/cs + 1
		}
		if chunks > store.MaxChunkOps {
			slow = append(slow, a.Ino)
			continue
		}
		ops, opIno = append(ops, store.DeleteInode(a.Ino, a.Ver)), append(opIno, a.Ino)
		for _, o := range store.DeleteChunkOps(a.Ino, 0, chunks-1, store.DataVersion(a.Dgen+1, 0)) {
			ops, opIno = append(ops, o), append(opIno, 0)
		}
	}
	if len(ops) > 0 {
		out, err := j.b.Bulk(ctx, ops)
		for i, ino := range opIno {
			switch {
			case ino == 0:
				// A chunk: one left behind is reclaimed by fsck.
			case err != nil:
				slow = append(slow, ino)
			case out[i].Err != nil && !errors.Is(out[i].Err, store.ErrNotFound):
				slow = append(slow, ino) // changed since the read
			}
		}
	}
	for _, ino := range slow {
		one(ino)
	}
}

// InodeBackend is what dropping a link needs of the store.
type InodeBackend interface {
	GetInode(ctx context.Context, ino uint64) (store.Inode, error)
	Write(ctx context.Context, o store.BulkOp) (store.Version, error)
	DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (int64, error)
	ChunkSize() int64
}

// DropLink removes one link from inode ino, one of its names in directory
// dir having gone (an unlink, or a rename that replaced it; dir 0: not
// known, see store.Inode.Unlinked), with a compare-and-set of its count, and deletes the inode and its data once no link is left (a
// directory has one name only). keep, if not nil, is asked first about an
// inode left without links: a session means it must outlive them, because
// the caller's mount, in that session, has the file open and deletes it at
// the last close (DeleteUnlinked); the inode is written with that session
// as its Keeper. "" lets it go. DropLink returns the inode as it left it, or the zero
// Inode once it is gone. An inode already gone is no error: someone else
// dropped its last link.
func DropLink(ctx context.Context, b InodeBackend, ino, dir uint64, keep func(store.Inode) string) (store.Inode, error) {
	return DropLinkFrom(ctx, b, store.Inode{Ino: ino}, dir, keep)
}

// DropLinkFrom is DropLink starting from known, the inode as the caller
// last read it: its first compare-and-set is made at that version, which
// saves the read when nobody changed the inode since (and costs one
// failed write when someone did). known with an unknown version is read
// first. An inode that goes with this link is deleted at the version read,
// in one write: no intermediate count of zero, since nobody keeps it.
func DropLinkFrom(ctx context.Context, b InodeBackend, known store.Inode, dir uint64, keep func(store.Inode) string) (store.Inode, error) {
	t := time.Now().UnixNano()
	a := known
	var sent *store.Inode // the write of this drop whose outcome is unknown, and its error
	var sentErr error
	var deleting *store.Inode // the inode as read by a delete whose outcome is unknown
	for attempt, unknown := 0, 0; ; attempt++ {
		if attempt > 0 || !a.Ver.Known() {
			var err error
			a, err = b.GetInode(ctx, known.Ino)
			if errors.Is(err, store.ErrNotFound) {
				if deleting != nil { // that delete landed: its data goes too
					return store.Inode{}, deleteData(ctx, b, *deleting)
				}
				return store.Inode{}, nil
			}
			if err != nil {
				if sent != nil {
					return store.Inode{}, unknownDrop(sentErr)
				}
				return store.Inode{}, err
			}
		}
		if sent != nil && a.Ver != sent.Ver {
			// Written since the write whose outcome is unknown was read:
			// by that write (its count, and this drop's ctime, to the
			// nanosecond), or by someone else, and then it cannot be told.
			if a.Ctime == t && a.Nlink == sent.Nlink {
				return a, nil
			}
			return store.Inode{}, unknownDrop(sentErr)
		}
		read := a
		a = a.Unlinked(dir)
		a.Ctime = t
		goes := a.Nlink == 0 || a.Type == store.TypeDir
		if goes && keep != nil {
			a.Keeper = keep(a)
			goes = a.Keeper == ""
		}
		if goes {
			_, err := b.Write(ctx, store.DeleteInode(a.Ino, read.Ver))
			switch {
			case errors.Is(err, store.ErrUnavailable) && unknown < 3 && ctx.Err() == nil:
				// Deleted or not: read again (gone: it was; still at
				// this version: it was not, and is deleted again, which
				// a late copy of the first then cannot follow).
				unknown++
				c, r := a, read
				c.Ver = read.Ver
				sent, sentErr, deleting = &c, err, &r
				store.Backoff(ctx, unknown+5, time.Second)
				continue
			case errors.Is(err, store.ErrNotFound) && sent != nil:
				// The first copy of the delete landed meanwhile.
				return store.Inode{}, deleteData(ctx, b, read)
			case errors.Is(err, store.ErrConflict) && attempt < 50:
				store.Backoff(ctx, attempt, store.InodeBackoff)
				continue
			case errors.Is(err, store.ErrNotFound):
				return store.Inode{}, nil
			case err != nil && sent != nil:
				return store.Inode{}, unknownDrop(err) // an earlier try may have landed
			case err != nil:
				return store.Inode{}, err
			}
			return store.Inode{}, deleteData(ctx, b, read)
		}
		v, err := b.Write(ctx, store.PutInode(a, read.Ver))
		if errors.Is(err, store.ErrUnavailable) && unknown < 3 && ctx.Err() == nil {
			// Counted down or not: read again (see sent above).
			unknown++
			c := a
			c.Ver = read.Ver
			sent, sentErr = &c, err
			store.Backoff(ctx, unknown+5, time.Second)
			continue
		}
		if errors.Is(err, store.ErrConflict) && attempt < 50 {
			store.Backoff(ctx, attempt, store.InodeBackoff)
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			return store.Inode{}, nil
		}
		if err != nil && (sent != nil || errors.Is(err, store.ErrUnavailable)) {
			return store.Inode{}, unknownDrop(err) // this try, or an earlier one, may have landed
		}
		if err != nil {
			return store.Inode{}, err
		}
		a.Ver = v
		return a, nil
	}
}

// ErrDropUnknown: a drop of a link whose write had an unknown outcome that
// reading again could not settle (someone else wrote the inode since). It
// must not be tried again: if it landed, a second drop takes a link the
// file still has, and deletes it under its other name (campaign seed
// 371384013). Left so, the count may be one too high: a leak fsck
// --repair reclaims, never a name without its file.
var ErrDropUnknown = errors.New("outcome of a link's drop unknown")

func unknownDrop(err error) error { return fmt.Errorf("%w: %w", ErrDropUnknown, err) }

// DeleteUnlinked removes an inode document with no links left, and its
// data chunks. The chunks' delete takes a data version above every
// generation the inode handed out (its Dgen can no longer move once the
// inode is gone), so that no writer's late request brings a chunk back.
func DeleteUnlinked(ctx context.Context, b InodeBackend, a store.Inode) error {
	_, err := RemoveUnlinked(ctx, b, a)
	return err
}

// RemoveUnlinked is DeleteUnlinked for a caller that must know the
// outcome (fsck reporting a repair): kept is true when the inode was found
// linked again meanwhile and left in place.
func RemoveUnlinked(ctx context.Context, b InodeBackend, a store.Inode) (kept bool, err error) {
	for attempt := 0; ; attempt++ {
		_, err := b.Write(ctx, store.DeleteInode(a.Ino, a.Ver))
		if errors.Is(err, store.ErrNotFound) {
			return false, nil // someone else deleted it, and its chunks
		}
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			// Changed meanwhile: a writer elsewhere took a data generation,
			// or a link was made. Without links it still goes.
			a, err = b.GetInode(ctx, a.Ino)
			if errors.Is(err, store.ErrNotFound) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if a.Nlink > 0 && a.Type != store.TypeDir {
				return true, nil // re-linked: it lives on
			}
			continue
		}
		if err != nil {
			return false, err
		}
		break
	}
	return false, deleteData(ctx, b, a)
}

// deleteData deletes the data chunks of a, an inode just deleted, at a
// data version above every generation it handed out.
// DeleteData removes the data chunks of a file whose inode document a
// (as last read) is gone, at a data version above every generation it
// handed out (see DeleteUnlinked).
func DeleteData(ctx context.Context, b InodeBackend, a store.Inode) error {
	return deleteData(ctx, b, a)
}

func deleteData(ctx context.Context, b InodeBackend, a store.Inode) error {
	if a.Type != store.TypeFile || a.Size <= 0 {
		return nil
	}
	cs := b.ChunkSize()
	_, err := b.DeleteChunks(ctx, a.Ino, 0, (a.Size-1)/cs, store.DataVersion(a.Dgen+1, 0))
	return err
}
