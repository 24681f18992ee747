package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func (n *node) linkLocked(ctx context.Context, tn *node, dir, path string, out *fuse.EntryOut) (*gofs.Inode, error) {
	if err := n.checkDirAt(ctx, dir, true); err != nil {
		return nil, err
	}
	// Count the link first: a crash in between leaves a count one too high
	// (a leak fsck reclaims), never a path to an inode that thinks it has
	// no links and may be deleted.
	t := now()
	a, err := n.f.updateInode(ctx, tn.ino(), func(a *store.Inode) error {
		if a.Nlink >= 65000 {
			return syscall.EMLINK
		}
		a.Nlink++
		a.Ctime = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	d := store.Dentry{Path: path, Ino: a.Ino, Type: a.Type}
	n.f.cache.InvalidatePath(path)
	n.f.noteWrite()
	v, err := n.f.st.CreateDentry(ctx, d)
	if errors.Is(err, store.ErrExists) {
		if cleared, cerr := n.f.clearGarbage(ctx, path); cerr == nil && cleared {
			v, err = n.f.st.CreateDentry(ctx, d)
		}
	}
	if err != nil {
		if _, uerr := n.f.updateInode(ctx, a.Ino, func(a *store.Inode) error { a.Nlink--; return nil }); uerr != nil {
			n.f.log.Warn("could not undo a link count", "ino", a.Ino, "err", uerr)
		}
		return nil, err
	}
	n.f.touchDir(n.ino(), t)
	d.Ver = v
	d.Parent, d.Name = store.Split(path)
	sn := store.Node{Dentry: d, Attr: a}
	n.f.cache.PutNode(sn, n.f.cache.Gen())
	n.f.fillAttr(a, &out.Attr)
	return tn.EmbeddedInode(), nil
}

// touchDir sets a directory's mtime and ctime after a change of its
// entries, with a partial update (no read, no conflict with siblings). It
// is synchronous: a later explicit utimens (rsync, tar) must win over it.
func (f *FS) touchDir(ino uint64, t int64) {
	f.cache.InvalidateInode(ino)
	ctx, cancel := context.WithTimeout(context.Background(), f.st.Timeout())
	defer cancel()
	res, err := f.st.Bulk(ctx, []store.BulkOp{f.st.OpTouchInode(ino, t, t)})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		f.log.Warn("could not update directory times", "ino", ino, "err", err)
	}
}
