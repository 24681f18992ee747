package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Entry is what a create asks for.
type Entry struct {
	Type store.FileType
	// Mode holds the permission bits (and setuid, setgid, sticky), the
	// umask already applied (the kernel applies it before it asks).
	Mode uint32
	// Uid and Gid own the new inode; in a setgid directory the
	// directory's group owns it instead, as on a local filesystem.
	Uid, Gid uint32
	Target   string // a symlink's target
	Rdev     uint32 // a device's number
}

// NewInode is the inode document of a new entry made as e asks in
// directory inode dir, at time t, with a fresh inode number: anything but
// a directory has dir as its Parents (whose delegations hold its
// attributes), a file's creator owns its first data generation, a
// directory has the links of "." and of its name (DirLinks), a symlink's
// size is its target's length and its mode 0777, a device keeps its
// number. A create writes it with the entry's path document (NewDentry);
// import writes many of them in bulk, with the local file's times, size
// and link count in place of a new file's.
func NewInode(e Entry, dir uint64, t int64) store.Inode {
	a := store.Inode{Ino: store.NewIno(), Type: e.Type, Mode: e.Mode & 0o7777, Uid: e.Uid, Gid: e.Gid, Nlink: 1,
		Atime: t, Mtime: t, Ctime: t, Btime: t, Target: e.Target}
	if e.Type != store.TypeDir {
		a.Parents = []uint64{dir}
	}
	switch {
	case e.Type == store.TypeFile:
		a.Dgen = 1
	case e.Type == store.TypeDir:
		a.Nlink = DirLinks(0)
	case e.Type == store.TypeSymlink:
		a.Size = int64(len(e.Target))
		a.Mode = 0o777
	case e.Type.IsDevice():
		a.Rdev = e.Rdev
	}
	return a
}

// NewDentry is the path document that names inode a at path.
func NewDentry(path string, a store.Inode) store.Dentry {
	return store.Dentry{Path: path, Ino: a.Ino, Type: a.Type}
}

// DirLinks is the link count of a directory with subdirs subdirectories:
// "." and its name in its parent, plus each subdirectory's "..".
func DirLinks(subdirs uint32) uint32 { return 2 + subdirs }

// check refuses what no create can make.
func (e Entry) check() error {
	switch e.Type {
	case store.TypeFile, store.TypeDir, store.TypeFifo, store.TypeSocket, store.TypeCharDev, store.TypeBlockDev:
	case store.TypeSymlink:
		if e.Target == "" {
			return errnoErr(syscall.ENOENT, "empty symlink target")
		}
		if len(e.Target) > store.MaxPath {
			return errnoErr(syscall.ENAMETOOLONG, "symlink target of %d bytes", len(e.Target))
		}
	default:
		return errnoErr(syscall.EINVAL, "cannot create a file of type %q", e.Type)
	}
	return nil
}

// MakeAt makes name in directory parent (mkdir, create, symlink, mknod):
// a new inode and its path, in one bulk: the inode, the path
// (op_type=create, so two creators never both win) and the directory's
// timestamps (and link count, for a subdirectory). A path whose inode
// could not be written is rolled back; a crash can only leave an unreachable inode, never a path
// without an inode.
func (f *Mount) MakeAt(ctx context.Context, parent Dir, name string, e Entry) (store.Node, error) {
	if err := e.check(); err != nil {
		return store.Node{}, err
	}
	if err := store.CheckName(name); err != nil {
		return store.Node{}, err
	}
	if f.opts.ReadOnly {
		return store.Node{}, f.readOnlyRefusal(ctx, parent, name)
	}
	defer f.changing.begin(parent.Ino())()
	sn, err := f.createEntry(ctx, parent, name, e)
	// What this mount just wrote it knows exactly: the name, the new
	// inode's attributes (a new directory's own, under the delegation it
	// was born with), and the directory's (followed by dirLinksOp).
	f.delegs.changedThroughDirLinks(parent.Ino(), name, dirEntry{ino: sn.Ino, typ: sn.Type}, err == nil)
	if err == nil {
		f.delegs.wrote(parent.Ino(), name, sn.Attr)
	}
	return sn, err
}

// readOnlyRefusal is what a read-only filesystem answers a call that
// would make name in directory parent (mkdir, mknod, symlink, link,
// open with O_CREAT): EEXIST if the name is taken, else EROFS. Linux looks
// the name up before it asks for write access to the mount
// (filename_create), so a taken name is EEXIST on a read-only
// filesystem too. The name is read now, a mount writing the directory in
// memory recalled first, as a create on a writable mount would.
func (f *Mount) readOnlyRefusal(ctx context.Context, parent Dir, name string) error {
	dir, ok := parent.StorePath()
	if !ok {
		return errnoErr(syscall.ENOENT, "directory inode %d was removed", parent.Ino())
	}
	path := store.Join(dir, name)
	_, err := f.resolveLive(ctx, parent.Ino(), dir, path)
	switch {
	case err == nil:
		return fmt.Errorf("%q: %w", path, store.ErrExists)
	case errors.Is(err, store.ErrNotFound):
		return syscall.EROFS
	}
	return err
}

func (f *Mount) createEntry(ctx context.Context, parent Dir, name string, e Entry) (store.Node, error) {
	if st, how := f.holdOf(parent.Ino()); how == holdWrite {
		if sn, handled, err := f.createPending(ctx, st, parent, name, e); handled {
			return sn, err
		}
	}
	if err := f.settle(ctx); err != nil {
		return store.Node{}, err
	}
	if sn, handled, err := f.createShared(ctx, parent, name, e); handled {
		return sn, err
	}
	dir, path, txn, err := f.lockEntry(ctx, parent, name)
	if err != nil {
		return store.Node{}, err
	}
	sn, err := f.createLocked(ctx, parent, dir, path, e)
	created := err == nil
	f.end(ctx, txn, &err)
	if created && errors.Is(err, locking.ErrLeaseLost) {
		// Our locks were taken from us (this mount was frozen past its
		// lease): someone may have removed the directory meanwhile. The
		// create reports EIO, so it must leave nothing behind.
		f.undoCreate(ctx, sn, parent.Ino())
	}
	return sn, err
}

// undoCreate removes what a create in directory parent wrote, at the
// versions it wrote.
func (f *Mount) undoCreate(ctx context.Context, sn store.Node, parent uint64) {
	if sn.Type == store.TypeDir {
		if empty, err := f.isEmptyDir(ctx, sn.Path); err != nil || !empty {
			return
		}
	}
	f.cache.InvalidatePath(sn.Path)
	if _, err := f.st.Write(ctx, store.DeleteDentry(sn.Path, sn.Dentry.Ver)); err != nil {
		f.log.Warn("could not undo a fenced create", "path", sn.Path, "err", err)
		return
	}
	if _, err := f.st.Write(ctx, store.DeleteInode(sn.Ino, sn.Attr.Ver)); err != nil {
		f.log.Warn("could not undo a fenced create's inode", "ino", sn.Ino, "err", err)
	}
	if sn.Type == store.TypeDir {
		f.addDirLinks(ctx, parent, -1, 0)
	}
}

// createLocked is create under the locks: it re-checks, with realtime
// reads, that the directory is still there and still this inode.
func (f *Mount) createLocked(ctx context.Context, parent Dir, dir, path string, e Entry) (store.Node, error) {
	if err := f.checkDirAt(ctx, parent.Ino(), dir, true); err != nil {
		return store.Node{}, err
	}
	sn, err := f.writeNew(ctx, parent.Ino(), path, e)
	if errors.Is(err, store.ErrExists) {
		// Taken by a visible entry, or by the garbage of an aborted or
		// finished rename, which we may clear since we hold its name.
		if cleared, cerr := f.clearGarbage(ctx, path); cerr != nil || !cleared {
			if cerr != nil {
				return store.Node{}, cerr
			}
			return store.Node{}, err
		}
		return f.createLocked(ctx, parent, dir, path, e)
	}
	return sn, err
}

// createShared is a create under shared locks only (see locking.Share):
// Elasticsearch's create-if-absent decides the name. handled is false when
// the locked path must decide instead: the name is taken (by an entry, or
// by garbage only the name's lock may clear), or the strategy has no
// shared part, or the directory moved meanwhile.
func (f *Mount) createShared(ctx context.Context, parent Dir, name string, e Entry) (sn store.Node, handled bool, err error) {
	dir, ok := parent.StorePath()
	if !ok {
		return store.Node{}, false, nil
	}
	path := store.Join(dir, name)
	if store.CheckPath(path) != nil {
		return store.Node{}, false, nil
	}
	h, handled, err := f.leaseEntry(ctx, parent, dir, path)
	if h == nil {
		return store.Node{}, handled, err
	}
	defer h.End()
	if err := h.Sess.Check(); err != nil {
		return store.Node{}, true, err
	}
	sn, err = f.writeNew(ctx, parent.Ino(), path, e)
	if errors.Is(err, store.ErrExists) {
		return store.Node{}, false, nil
	}
	if err != nil {
		return store.Node{}, true, err
	}
	// No release follows to tell us whether our locks were taken from us
	// meanwhile: a session still valid after the write was not declared
	// dead before it landed (others wait lease + grace of silence).
	if err := h.Sess.Check(); err != nil {
		f.undoCreate(ctx, sn, parent.Ino())
		return store.Node{}, true, err
	}
	return sn, true, nil
}

// leaseEntry takes the shared part of the strategy's locks of a create of
// path in directory parent (at dir), as a lease (see locking.Share), and
// checks once per lease that the directory is still at dir: while the
// lease lives nobody can rename or remove it, but another mount may have
// moved an ancestor before, without this mount's kernel knowing. A nil
// lease means the locked path must decide: with handled, err is the
// answer; without, the strategy has no shared part or the directory moved
// while we waited (the paths are stale).
func (f *Mount) leaseEntry(ctx context.Context, parent Dir, dir, path string) (h *locking.Share, handled bool, err error) {
	reqs, ok := locking.SharedPart(f.co.Strategy.Entry(dir, path), path)
	if !ok {
		return nil, false, nil
	}
	// Changes of one directory are compatible with each other, so the
	// change joins the lease too.
	h, err = f.co.Share(ctx, append(reqs, locking.Change(parent.Ino(), dir)))
	if err != nil {
		return nil, true, err
	}
	if now, ok := parent.StorePath(); !ok || now != dir {
		h.End()
		return nil, false, nil
	}
	if !h.Checked(dir, parent.Ino()) {
		if err := f.checkDirAt(ctx, parent.Ino(), dir, true); err != nil {
			h.End()
			return nil, true, err
		}
		h.NoteChecked(dir, parent.Ino())
	}
	return h, true, nil
}

// writeNew writes the inode and the path document of a new entry in
// directory inode dir, with create-if-absent for both, and the directory's
// times and count (see dirLinksOp). store.ErrExists: the name is taken,
// and nothing was left behind.
func (f *Mount) writeNew(ctx context.Context, dir uint64, path string, e Entry) (store.Node, error) {
	typ, mode := e.Type, e.Mode
	parent, err := f.dirAttrs(ctx, dir)
	if err != nil {
		return store.Node{}, err
	}
	uid, gid := e.Uid, e.Gid
	if parent.Mode&syscall.S_ISGID != 0 {
		gid = parent.Gid // BSD group semantics of setgid directories
		if typ == store.TypeDir {
			mode |= syscall.S_ISGID
		}
	}
	t := now()
	a := NewInode(Entry{Type: typ, Mode: mode, Uid: uid, Gid: gid, Target: e.Target, Rdev: e.Rdev}, dir, t)
	subdirs := 0 // what the new entry adds to the parent's link count
	if typ == store.TypeDir {
		subdirs = 1
	}
	d := NewDentry(path, a)
	opInode := store.CreateInode(a)
	if err := opInode.Err(); err != nil {
		return store.Node{}, err
	}
	opPath := store.CreateDentry(d)
	if err := opPath.Err(); err != nil {
		return store.Node{}, err
	}
	opParent, pl, err := f.dirLinksOp(ctx, dir, subdirs, t)
	if err != nil {
		return store.Node{}, err
	}
	ops := []store.BulkOp{opInode, opPath, opParent}
	var born func(store.BulkResult, bool) *locking.Delegation
	if typ == store.TypeDir && f.delegs != nil {
		// A directory made here is delegated here from birth, and known
		// empty: what is made in it needs no lookup of the store.
		var op store.BulkOp
		// With write delegations, born writable: what is made in it
		// stays in memory until a flush (see writeback.go).
		mode := store.ReadDeleg
		if f.wb != nil {
			mode = store.Exclusive
		}
		op, born = f.co.Delegations.Born(a.Ino, path, mode)
		ops = append(ops, op)
	}
	f.cache.InvalidatePath(path)
	f.noteWrite()
	sent := time.Now()
	res, err := f.st.Bulk(ctx, ops)
	if err != nil {
		// The outcome is unknown, item by item: a node that died after
		// forwarding some items, an answer lost. Leaving it so could
		// leave a name whose inode never landed (a corrupt entry), or
		// a create a late request makes after the caller was told EIO.
		sn, serr := f.remakeNew(ctx, a, d, sent, err)
		f.settleDirLinks(ctx, pl, store.BulkResult{Err: err}, serr == nil)
		if born != nil {
			born(store.BulkResult{Err: err}, false)
		}
		if serr != nil {
			return store.Node{}, serr
		}
		f.cache.PutNode(sn, f.cache.Gen())
		return sn, nil
	}
	made := res[0].Err == nil && res[1].Err == nil
	f.settleDirLinks(ctx, pl, res[2], made)
	if born != nil {
		f.delegs.born(born(res[3], made))
	}
	if res[1].Err != nil {
		// The name is taken (or the path write failed): undo the inode.
		if res[0].Err == nil {
			if _, derr := f.st.Write(ctx, store.DeleteInode(a.Ino, res[0].Ver)); derr != nil {
				f.log.Warn("could not remove the inode of a failed create", "ino", a.Ino, "err", derr)
			}
		}
		return store.Node{}, res[1].Err
	}
	if res[0].Err != nil {
		// The path exists but its inode does not: undo the path.
		if _, derr := f.st.Write(ctx, store.DeleteDentry(path, res[1].Ver)); derr != nil {
			f.log.Error("could not remove a path whose inode failed", "path", path, "err", derr)
		}
		return store.Node{}, res[0].Err
	}
	a.Ver, d.Ver = res[0].Ver, res[1].Ver
	d.Parent, d.Name = store.Split(path)
	sn := store.Node{Dentry: d, Attr: a}
	f.cache.PutNode(sn, f.cache.Gen())
	return sn, nil
}

// remakeNewTries bounds remakeNew's attempts while the cluster stays
// unavailable.
const remakeNewTries = 4

// remakeNew settles a create whose bulk's outcome is unknown (first) by
// making its inode a and its name d again, with create-if-absent: what of
// the first try landed is found (inode numbers are random, so an inode of
// this number is this create's), what did not is made, and the first try,
// should it still be on its way, can no longer land (its creates find the
// documents). The name taken by another entry means the create lost: its
// inode, if it landed, is removed, and the answer is store.ErrExists. When
// the cluster cannot tell within a few tries, the answer is first: the
// create may still be made by a request held on the way (as on NFS).
//
// "Can no longer land" holds only while the documents are there: once
// the name is removed (an unlink a moment later, on any mount), a first
// try still on its way makes both again, and the removed file comes back
// (campaign seed 278378662: a create's bulk held 8 s, the file unlinked
// after 6.5, back at 8). So the answer, made or lost, waits until every
// try whose outcome was unknown (the first sent at sent) can no longer
// land (outliveTries).
func (f *Mount) remakeNew(ctx context.Context, a store.Inode, d store.Dentry, sent time.Time, first error) (store.Node, error) {
	for attempt := 0; attempt < remakeNewTries; attempt++ {
		if attempt > 0 {
			store.Backoff(ctx, attempt+6, time.Second)
		}
		try := time.Now()
		res, err := f.st.Bulk(ctx, []store.BulkOp{store.CreateInode(a), store.CreateDentry(d)})
		if err != nil {
			if errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
				sent = try
				continue
			}
			return store.Node{}, first
		}
		inodeThere := res[0].Err == nil || errors.Is(res[0].Err, store.ErrExists)
		nameOurs := res[1].Err == nil
		if errors.Is(res[1].Err, store.ErrExists) {
			got, gerr := f.st.GetDentry(ctx, d.Path)
			switch {
			case gerr != nil:
				continue
			case got.Ino != a.Ino:
				// Another entry has the name: this create never made it.
				if inodeThere {
					n, derr := f.st.GetInode(ctx, a.Ino)
					if derr == nil {
						_, derr = f.st.Write(ctx, store.DeleteInode(a.Ino, n.Ver))
					}
					if derr != nil && !errors.Is(derr, store.ErrNotFound) {
						// Swept later: an inode no name points at.
						f.log.Warn("could not remove the inode of a create that lost its name", "ino", a.Ino, "err", derr)
					}
				}
				f.outliveTries(sent)
				return store.Node{}, store.ErrExists
			default:
				nameOurs = true
			}
		}
		if !inodeThere || !nameOurs {
			continue // an item refused for now: make it again
		}
		n, err := f.st.GetInode(ctx, a.Ino)
		if err != nil {
			continue
		}
		got, err := f.st.GetDentry(ctx, d.Path)
		if err != nil || got.Ino != a.Ino {
			continue
		}
		f.log.Info("a create whose answer was lost is made", "path", d.Path, "ino", a.Ino, "first", first)
		f.outliveTries(sent)
		return store.Node{Dentry: got, Attr: n}, nil
	}
	f.log.Warn("a create's outcome stays unknown; it may still be made", "path", d.Path, "ino", a.Ino, "err", first)
	return store.Node{}, first
}

// outliveTries waits until a write whose outcome was unknown, the last
// of them sent at sent, can no longer be applied by the cluster (twice
// the store's Timeout, see store.Store.Timeout), so that what the caller
// is told next (a create made, a link's name made) is not undone by that
// write landing late, after a removal it would reverse. Only calls that met an unknown
// outcome wait, and the kernel call waits with them: at most about twice
// --es-timeout more.
func (f *Mount) outliveTries(sent time.Time) {
	if d := time.Until(sent.Add(2 * f.st.Timeout())); d > 0 {
		f.log.Info("waiting until a write of unknown outcome can no longer land", "for", d.Round(time.Millisecond))
		time.Sleep(d)
	}
}
