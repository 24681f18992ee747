package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle streams a directory page by page from the store: memory is one
// page whatever the size of the directory. For readdirplus it also answers
// the kernel's per-entry lookups from the page, with one mget of the page's
// inodes instead of two GETs per entry.
type dirHandle struct {
	n    *node
	path string
	// locks: the owners that took advisory locks through this open
	// directory (filelock.go).
	locks lockOwners

	// The bridge serializes calls on one handle; no lock needed.
	sc     *locking.Pages
	page   []store.Dentry
	pos    int    // next entry of page to return
	off    uint64 // offset of the next entry
	dots   int    // "." and ".." returned so far
	byName map[string]int
	inodes map[uint64]store.Inode // attributes of the page, loaded on demand
	eof    bool

	// mem: the listing, served from a delegated directory's state (the
	// pages not returned yet), instead of sc.
	mem     []store.Dentry
	fromMem bool
	// collecting: a listing read under delegation st, which did not
	// know every name yet: its names are learned as they come, and read
	// to its end (listed entries, since own changes counted) it makes
	// the state complete.
	collecting bool
	listed     int
	st         *dirState
	since      uint64
	// wbSince: the write-back errors this description has reported at
	// fsyncdir (errseq.go).
	wbSince errSince
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileLookuper)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if n.removed.Load() {
		// Removed while the kernel holds it (a process's cwd): it opens,
		// as on Linux, and its listing fails (start).
		return &dirHandle{n: n}, 0, 0
	}
	if n.f.delegs.state(n.ino()) != nil {
		// Delegated: the listing comes from what this mount knows of the
		// inode, whatever its path is now.
		if p, ok := n.path(); ok {
			return &dirHandle{n: n, path: p, wbSince: n.f.errs.sample(n.ino())}, 0, 0
		}
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	p, err := n.f.dirPath(ctx, n, false)
	if err != nil {
		if err = n.removedOrStale(ctx, err); n.removed.Load() {
			return &dirHandle{n: n}, 0, 0
		}
		return nil, 0, n.f.toErrno("opendir", err)
	}
	return &dirHandle{n: n, path: p, wbSince: n.f.errs.sample(n.ino())}, 0, 0
}

func (d *dirHandle) start(ctx context.Context) error {
	f := d.n.f
	if d.n.removed.Load() {
		// As Linux answers getdents of a removed directory (for a removal
		// through this mount the kernel answers so itself).
		return errnoErr(syscall.ENOENT, "directory inode %d was removed", d.n.ino())
	}
	// The listing is by path: the one the directory has now (a rename
	// through this mount moves it), checked below to still name it unless
	// a delegation says so.
	if p, ok := d.n.path(); ok {
		d.path = p
	}
	st := f.delegs.state(d.n.ino())
	switch {
	case st == nil && f.delegs != nil:
		// With delegations, a change is seen by every mount once the call
		// that made it returns: the listing must see every change that
		// completed before it began, which search shows after a refresh.
		f.delegs.want(d.n.ino(), d.path, d.n.EmbeddedInode())
		if err := f.settleDir(ctx, d.n.ino()); err != nil {
			return err
		}
		// Whether the path still names the directory, and whether another
		// mount writes it (its entries may be in its memory only), are
		// read while the refresh runs.
		var de store.Dentry
		var derr, lerr error
		var lk store.LockDoc
		read := make(chan struct{})
		go func() {
			defer close(read)
			de, derr, lk, lerr = f.st.GetDentryWithLock(ctx, d.path, store.DelegLockID(d.n.ino()))
		}()
		err := f.refreshNow(ctx)
		<-read
		if err == nil {
			err = lerr
		}
		if err == nil && d.path != "/" {
			err = d.stillNamed(ctx, de, derr)
		}
		if err != nil {
			return err
		}
		if lk.WrittenElsewhere(f.co.Session().ID()) {
			if err := f.co.Delegations.RecallWriter(ctx, d.n.ino(), d.path); err != nil {
				return err
			}
			return d.start(ctx) // flushed now
		}
	case st == nil:
		// Read-your-writes: this mount's own creates must be listed, and
		// search is near-realtime. Refresh only if this mount wrote since
		// the last one.
		if err := f.refreshIfDirty(ctx); err != nil {
			return err
		}
		if err := f.checkDirAt(ctx, d.n.ino(), d.path, false); err != nil {
			return d.removedOrStale(ctx, err)
		}
	default:
		d.st = st
		if names, known, ok := st.listing(); ok {
			d.fromMem = true
			d.mem = make([]store.Dentry, len(names))
			for i, name := range names {
				e := known[name]
				d.mem[i] = store.Dentry{Path: store.Join(d.path, name), Parent: d.path, Name: name, Ino: e.ino, Type: e.typ}
			}
			return nil
		}
		// Every change made before the grant is in the index; a refresh
		// makes it searchable, and a listing after it is then complete.
		// Entries made here in memory are flushed into it first.
		if err := f.settle(ctx); err != nil {
			return err
		}
		d.since, d.collecting = st.changeCount(), true
		if err := f.refreshNow(ctx); err != nil {
			return err
		}
	}
	d.sc = f.co.View.List(d.path, store.DefaultPageSize)
	return nil
}

// stillNamed checks that de, the path document read at d.path (derr its
// error), names this directory as the view shows it.
func (d *dirHandle) stillNamed(ctx context.Context, de store.Dentry, derr error) error {
	f := d.n.f
	switch {
	case errors.Is(derr, store.ErrNotFound):
		return d.removedOrStale(ctx, errnoErr(syscall.ESTALE, "directory %q is gone", d.path))
	case derr != nil:
		return derr
	}
	vis, ok, err := f.co.View.Resolve(ctx, de)
	if err != nil {
		return err
	}
	if !ok {
		return d.removedOrStale(ctx, errnoErr(syscall.ESTALE, "directory %q is gone", d.path))
	}
	if err := dirIs(vis, d.n.ino(), d.path); err != nil {
		return d.removedOrStale(ctx, err)
	}
	return nil
}

// removedOrStale is the answer to a listing whose path no longer names
// the directory (err): ENOENT if its inode is gone, as Linux answers
// getdents of a removed directory, else err (ESTALE: another mount
// renamed it away, and esfs lists by path).
func (d *dirHandle) removedOrStale(ctx context.Context, err error) error {
	return d.n.removedOrStale(ctx, err)
}

// removedOrStale tells, for a directory whose path no longer names it
// (err, ESTALE), whether it was removed: then it is marked so (its
// attributes are answered as removedAttr says from now on) and the
// answer is ENOENT; else it is err.
func (n *node) removedOrStale(ctx context.Context, err error) error {
	if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	if _, ierr := n.f.st.GetInode(ctx, n.ino()); !errors.Is(ierr, store.ErrNotFound) {
		return err
	}
	if n.told.Load() != nil {
		n.removed.Store(true) // inode numbers are never reused
	}
	return errnoErr(syscall.ENOENT, "directory inode %d was removed", n.ino())
}

// next returns the listing's next page, nil at its end.
func (d *dirHandle) next(ctx context.Context) ([]store.Dentry, error) {
	if d.fromMem {
		n := min(len(d.mem), store.DefaultPageSize)
		if n == 0 {
			return nil, nil
		}
		page := d.mem[:n]
		d.mem = d.mem[n:]
		return page, nil
	}
	page, bad, err := d.sc.Next(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		d.n.f.log.Error("corrupt document skipped in listing", "dir", d.path, "err", b)
		d.collecting = false // the listing is not the directory's whole truth
	}
	if d.collecting {
		for _, e := range page {
			d.st.learn(e.Name, dirEntry{ino: e.Ino, typ: e.Type})
		}
		d.listed += len(page)
		if page == nil {
			d.st.listed(d.since, d.listed)
			d.collecting = false
		}
	}
	return page, nil
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	f := d.n.f
	if d.sc == nil && !d.fromMem {
		// Started before "." is returned: getdents of a directory removed
		// since it was opened fails at once (ENOENT), as on Linux.
		ctx, cancel := f.ctxOf(ctx)
		defer cancel()
		if err := d.start(ctx); err != nil {
			return nil, f.toErrno("readdir", err)
		}
	}
	if d.dots < 2 {
		d.dots++
		d.off++
		name := "."
		if d.dots == 2 {
			name = ".."
		}
		return &fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: d.n.ino(), Off: d.off}, 0
	}
	if d.pos >= len(d.page) && !d.eof {
		// Only a new page goes to the store: the deadline (a timer) is
		// made here, not for each of the page's entries.
		var cancel context.CancelFunc
		ctx, cancel = f.ctxOf(ctx)
		defer cancel()
	}
	for d.pos >= len(d.page) {
		if d.eof {
			return nil, 0
		}
		page, err := d.next(ctx)
		if err != nil {
			return nil, f.toErrno("readdir", err)
		}
		if page == nil {
			d.eof = true
			return nil, 0
		}
		d.page = append(d.page[:0], page...)
		d.pos = 0
		d.byName = make(map[string]int, len(d.page))
		for i, e := range d.page {
			d.byName[e.Name] = i
		}
		d.inodes = nil
	}
	e := d.page[d.pos]
	d.pos++
	d.off++
	return &fuse.DirEntry{Name: e.Name, Mode: typeBits(e.Type), Ino: e.Ino, Off: d.off}, 0
}

// Lookup serves readdirplus: the entry was just returned by Readdirent.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := d.n.f
	i, ok := d.byName[name]
	if !ok {
		return d.n.Lookup(ctx, name, out)
	}
	e := d.page[i]
	if d.inodes == nil {
		ctx, cancel := f.ctxOf(ctx)
		defer cancel()
		gen := f.cache.Gen()
		d.inodes = make(map[uint64]store.Inode, len(d.page))
		inos := make([]uint64, 0, len(d.page))
		names := make([]string, 0, len(d.page))
		// Subdirectories under delegations of their own learn their
		// attributes from the read, which comes after those grants.
		subs := map[uint64]*dirState{}
		watch := map[uint64]string{} // subdirectories other mounts may write
		changes := map[uint64]uint64{}
		for _, de := range d.page {
			if a, ok := f.wb.inode(de.Ino); ok {
				d.inodes[de.Ino] = a // made here, not flushed yet
				continue
			}
			if a, ok := d.held(de); ok {
				d.inodes[de.Ino] = a // a delegation holds them
				continue
			}
			if de.Type == store.TypeDir {
				if sub := f.delegs.state(de.Ino); sub != nil {
					subs[de.Ino], changes[de.Ino] = sub, sub.changeCount()
				} else if f.watched(de.Ino) {
					watch[de.Ino] = store.Join(d.path, de.Name)
				}
			}
			inos, names = append(inos, de.Ino), append(names, de.Name)
		}
		var res []store.InodeResult
		if len(inos) > 0 {
			var err error
			if res, err = f.inodesNow(ctx, inos, watch); err != nil {
				return nil, f.toErrno("readdirplus", err)
			}
		}
		for k, r := range res {
			if r.Err == nil {
				d.inodes[inos[k]] = r.Inode
				if d.st != nil {
					f.delegs.learnAttr(d.st, names[k], r.Inode)
				}
				if sub := subs[inos[k]]; sub != nil {
					sub.learnSelf(r.Inode, changes[inos[k]])
				}
				if d.fromMem {
					// The paths of a listing from memory were not read
					// now: only the attributes are fresh.
					f.cache.PutInode(r.Inode, gen)
				} else {
					f.cache.PutNode(store.Node{Dentry: d.page[d.byName[names[k]]], Attr: r.Inode}, gen)
				}
			}
		}
	}
	a, ok := d.inodes[e.Ino]
	if !ok || a.Type != e.Type {
		// Missing or inconsistent inode: let the ordinary lookup report it.
		return d.n.Lookup(ctx, name, out)
	}
	switch {
	case d.st != nil:
		// A listing made under a delegation: the kernel's entry is
		// invalidated on recall.
		defer d.st.tell(name, d.n.EmbeddedInode(), out)()
	case f.delegs != nil:
		uncached(out) // see node.Lookup
	}
	// newChild needs no deadline: it only registers the kernel's node.
	child := d.n.newChild(ctx, store.Node{Dentry: e, Attr: a}, out)
	d.n.tellAttrs(child, name, e.Ino, e.Type, out)
	f.boundKept(out)
	if out.EntryTimeout() == notKept || out.AttrTimeout() == notKept {
		// The kernel would keep this answer for a jiffy (see notKept),
		// and go-fuse fills the entry in its buffer past timedFS's
		// reach: an error makes it send the name alone (node id 0),
		// which the kernel lists without keeping anything of it, and
		// its next use of the name is a LOOKUP.
		return nil, syscall.EAGAIN
	}
	return child, 0
}

// held returns the attributes of entry e if a delegation holds them: a
// directory's own, a file's its directory's (when this listing is made
// under it).
func (d *dirHandle) held(e store.Dentry) (store.Inode, bool) {
	f := d.n.f
	if f.delegs == nil {
		return store.Inode{}, false
	}
	if e.Type == store.TypeDir {
		return f.wb.overlay(e.Ino, func() (store.Inode, bool) { return f.delegs.selfAttr(e.Ino, nil) })
	}
	if d.st == nil {
		return store.Inode{}, false
	}
	return f.delegs.attr(d.n.ino(), e.Name, e.Ino, nil)
}

// Seekdir restarts the listing and skips to entry off (offsets are entry
// positions: telldir returns the offset of the last entry read). A listing
// is in name order, so re-reading reaches the same entries unless the
// directory changed meanwhile, which POSIX leaves unspecified.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == d.off {
		return 0
	}
	d.Releasedir(ctx, 0)
	*d = dirHandle{n: d.n, path: d.path}
	for d.off < off {
		de, errno := d.Readdirent(ctx)
		if errno != 0 {
			return errno
		}
		if de == nil {
			break // past the end: the next read returns nothing
		}
	}
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if d.sc != nil {
		d.sc.Close()
	}
	if d.locks.any() {
		f := d.n.f
		ctx, cancel := context.WithTimeout(context.Background(), 4*f.st.Timeout())
		defer cancel()
		f.releaseHandleLocks(ctx, d.n.ino(), &d.locks)
		f.co.FileLocks.Forget(d.n.ino())
	}
}
