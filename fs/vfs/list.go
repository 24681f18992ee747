package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// ErrRemoved says that a directory a call was made in was removed (its
// inode is gone), not merely moved away: the call answers ENOENT, as
// Linux answers getdents of a removed directory, and the adapter answers
// the directory's attributes as a removed one's from then on.
var ErrRemoved = errors.New("directory removed")

// errNotAhead ends a reading ahead whose delegation was refused.
var errNotAhead = errors.New("not read ahead: no delegation")

// removedErr is ErrRemoved for directory inode ino, which answers ENOENT.
func removedErr(ino uint64) error {
	return fmt.Errorf("directory inode %d: %w: %w", ino, ErrRemoved, syscall.ENOENT)
}

// Listing streams a directory page by page from the store: memory is one
// page whatever the size of the directory. For readdirplus it also answers
// the kernel's per-entry lookups from the page, with one mget of the page's
// inodes instead of two GETs per entry. The kernel serializes calls on one
// open directory; a Listing takes no lock.
type Listing struct {
	f    *Mount
	dir  Dir
	kn   KernelNode // the kernel's node of the directory
	path string
	// locks: the owners that took advisory locks through this open
	// directory (filelock.go).
	locks LockOwners
	// reported: the write-back errors this description has reported at
	// fsyncdir (errseq.go).
	reported ErrSince

	started bool
	sc      *locking.Pages
	page    []store.Dentry
	byName  map[string]int
	inodes  map[uint64]store.Inode // attributes of the page, loaded on demand

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

	// ahead: a listing made to read the directory ahead of a walk
	// (walkahead.go), which takes no step a delegation was refused for.
	// subdirs: the subdirectories listed so far, for walking ahead.
	ahead   bool
	subdirs []store.Dentry
	// ownRead: the directory's own attributes were read (ahead only).
	// vouch: for a listing ahead, the state of the parent's delegation
	// it was listed under, which proves the path still names the
	// directory while it is valid and knows the name so.
	ownRead bool
	vouch   *dirState
}

// OpenDir opens directory d for a listing. A delegated directory's listing
// comes from what this mount knows of the inode, whatever its path is now;
// any other's path is checked to still name it (ESTALE, or ErrRemoved).
// kn is the kernel's node of the directory, which a delegation granted for
// the listing makes forget what it recalls.
func (f *Mount) OpenDir(ctx context.Context, d Dir, kn KernelNode) (*Listing, error) {
	if f.delegs.state(d.Ino()) != nil {
		if p, ok := d.StorePath(); ok {
			return &Listing{f: f, dir: d, kn: kn, path: p, reported: f.errs.sample(d.Ino())}, nil
		}
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	p, err := f.dirPath(ctx, d, false)
	if err != nil {
		return nil, f.removedOrStale(ctx, d.Ino(), err)
	}
	return &Listing{f: f, dir: d, kn: kn, path: p, reported: f.errs.sample(d.Ino())}, nil
}

// Locks are the owners that took advisory locks through this open
// directory.
func (l *Listing) Locks() *LockOwners { return &l.locks }

// Reported is what this description has reported of the write-back errors.
func (l *Listing) Reported() *ErrSince { return &l.reported }

// Rewind starts the listing again (seekdir), from what the directory holds
// then.
func (l *Listing) Rewind() {
	if l.sc != nil {
		l.sc.Close()
	}
	l.started, l.sc, l.page, l.byName, l.inodes = false, nil, nil, nil, nil
	l.mem, l.fromMem, l.collecting, l.listed, l.st, l.since = nil, false, false, 0, nil, 0
	l.subdirs = nil
}

// Close ends the listing: the locks taken through it go.
func (l *Listing) Close() {
	if l.sc != nil {
		l.sc.Close()
	}
	if l.locks.any() {
		f := l.f
		ctx, cancel := context.WithTimeout(context.Background(), 4*f.st.Timeout())
		defer cancel()
		f.ReleaseLocks(ctx, l.dir.Ino(), &l.locks)
		f.co.FileLocks.Forget(l.dir.Ino())
	}
}

func (l *Listing) start(ctx context.Context) error {
	f := l.f
	d := l.dir
	// The listing is by path: the one the directory has now (a rename
	// through this mount moves it), checked below to still name it unless
	// a delegation says so.
	if p, ok := d.StorePath(); ok {
		l.path = p
	}
	if !l.ahead {
		f.descend(l.path)
		f.awaitAhead(ctx, d.Ino())
	}
	st := f.delegs.state(d.Ino())
	granted := false
	if st == nil && f.delegs != nil {
		// A first listing: the delegation first, so that the entries
		// go to the kernel with attributes it keeps (see grantNow).
		st = f.delegs.grantNow(ctx, d.Ino(), l.path, l.kn)
		granted = st != nil
		if st == nil && l.ahead {
			return errNotAhead
		}
	}
	switch {
	case st == nil && f.delegs != nil:
		// With delegations, a change is seen by every mount once the call
		// that made it returns: the listing must see every change that
		// completed before it began, which search shows after a refresh.
		// (No delegation: grantNow was just refused, or is at its bound.)
		if err := f.settleDir(ctx, d.Ino()); err != nil {
			return err
		}
		// Whether the path still names the directory, and whether another
		// mount writes it (its entries may be in its memory only), are
		// read while the refresh runs.
		var de store.Dentry
		var derr, lerr error
		var lk store.LockDoc
		err := f.refreshBeside(ctx, func() {
			de, derr, lk, lerr = f.st.GetDentryWithLock(ctx, l.path, store.DelegLockID(d.Ino()))
		})
		if err == nil {
			err = lerr
		}
		if err == nil && l.path != "/" {
			err = l.stillNamed(ctx, de, derr)
		}
		if err != nil {
			return err
		}
		if lk.WrittenElsewhere(f.co.Session().ID()) {
			if err := f.co.Delegations.RecallWriter(ctx, d.Ino(), l.path); err != nil {
				return err
			}
			return l.start(ctx) // flushed now
		}
	case st == nil:
		// Read-your-writes: this mount's own creates must be listed, and
		// search is near-realtime. Refresh only if this mount wrote since
		// the last one.
		if err := f.refreshIfDirty(ctx); err != nil {
			return err
		}
		if err := f.checkDirAt(ctx, d.Ino(), l.path, false); err != nil {
			return f.removedOrStale(ctx, d.Ino(), err)
		}
	default:
		l.st = st
		if names, entries, ok := st.listing(); ok {
			l.fromMem = true
			l.mem = make([]store.Dentry, len(names))
			for i, name := range names {
				e := entries[i]
				l.mem[i] = store.Dentry{Path: store.Join(l.path, name), Parent: l.path, Name: name, Ino: e.ino, Type: e.typ}
			}
			return nil
		}
		// Every change made before the grant is in the index; a refresh
		// makes it searchable, and a listing after it is then complete.
		// Entries made here in memory are flushed into it first.
		if err := f.settle(ctx); err != nil {
			return err
		}
		l.since, l.collecting = st.changeCount(), true
		if !granted || l.path == "/" || l.vouched() {
			if err := f.refreshNow(ctx); err != nil {
				return err
			}
			break
		}
		// Granted just now, by inode: whether the path still names the
		// directory (another mount may have renamed it since it was
		// opened) is read while the refresh runs. No other mount
		// writes it: its write delegation would have refused ours.
		var de store.Dentry
		var derr error
		err := f.refreshBeside(ctx, func() { de, derr = f.st.GetDentry(ctx, l.path) })
		if err == nil {
			err = l.stillNamed(ctx, de, derr)
		}
		if err != nil {
			return err
		}
	}
	l.sc = f.co.View.List(l.path, store.DefaultPageSize)
	return nil
}

// vouched says whether the delegation of the parent, still valid, knows
// the directory's name to name it: no other mount renamed it since (a
// rename changes the parent's entries, which recalls that delegation
// first).
func (l *Listing) vouched() bool {
	if l.vouch == nil {
		return false
	}
	_, name := store.Split(l.path)
	e, ok := l.vouch.lookup(name)
	return ok && !e.absent && e.ino == l.dir.Ino() && !l.vouch.d.Revoked()
}

// stillNamed checks that de, the path document read at l.path (derr its
// error), names this directory as the view shows it.
func (l *Listing) stillNamed(ctx context.Context, de store.Dentry, derr error) error {
	f := l.f
	ino := l.dir.Ino()
	switch {
	case errors.Is(derr, store.ErrNotFound):
		return f.removedOrStale(ctx, ino, errnoErr(syscall.ESTALE, "directory %q is gone", l.path))
	case derr != nil:
		return derr
	}
	vis, ok, err := f.co.View.Resolve(ctx, de)
	if err != nil {
		return err
	}
	if !ok {
		return f.removedOrStale(ctx, ino, errnoErr(syscall.ESTALE, "directory %q is gone", l.path))
	}
	if err := dirIs(vis, ino, l.path); err != nil {
		return f.removedOrStale(ctx, ino, err)
	}
	return nil
}

// removedOrStale tells, for directory ino whose path no longer names it
// (err, ESTALE), whether it was removed: then the answer is ErrRemoved
// (ENOENT); else it is err (ESTALE: another mount renamed it away, and
// esfs lists by path).
func (f *Mount) removedOrStale(ctx context.Context, ino uint64, err error) error {
	if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	if _, ierr := f.st.GetInode(ctx, ino); !errors.Is(ierr, store.ErrNotFound) {
		return err
	}
	return removedErr(ino)
}

// Next returns the listing's next page, nil at its end. The first call
// starts the listing: getdents of a directory removed since it was opened
// fails at once (ErrRemoved), as on Linux.
func (l *Listing) Next(ctx context.Context) ([]store.Dentry, error) {
	ctx, cancel := l.f.ctxOf(ctx)
	defer cancel()
	if !l.started {
		if err := l.start(ctx); err != nil {
			return nil, err
		}
		l.started = true
	}
	page, err := l.next(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range page {
		if e.Type == store.TypeDir && len(l.subdirs) < aheadSubdirs {
			l.subdirs = append(l.subdirs, e)
		}
	}
	if page == nil && !l.ahead && l.f.delegs != nil {
		l.f.ahead.listedAll(l.path, l.subdirs, l.st)
	}
	l.page = append(l.page[:0], page...)
	l.byName = make(map[string]int, len(l.page))
	for i, e := range l.page {
		l.byName[e.Name] = i
	}
	l.inodes = nil
	return page, nil
}

func (l *Listing) next(ctx context.Context) ([]store.Dentry, error) {
	if l.fromMem {
		n := min(len(l.mem), store.DefaultPageSize)
		if n == 0 {
			return nil, nil
		}
		page := l.mem[:n]
		l.mem = l.mem[n:]
		return page, nil
	}
	page, bad, err := l.sc.Next(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		if !l.f.NoteDamaged("listing "+l.path, b) {
			l.f.log.Error("corrupt document skipped in listing", "dir", l.path, "err", b)
		}
		l.collecting = false // the listing is not the directory's whole truth
	}
	if l.collecting {
		for _, e := range page {
			l.st.learn(e.Name, dirEntry{ino: e.Ino, typ: e.Type})
		}
		l.listed += len(page)
		if page == nil {
			l.st.listed(l.since, l.listed)
			l.collecting = false
		}
	}
	return page, nil
}

// Entry answers readdirplus's lookup of name, an entry of the page Next
// returned last, with its attributes: ok false when it is not there or its
// inode did not read as listed (then the ordinary lookup answers).
func (l *Listing) Entry(ctx context.Context, name string) (store.Node, bool, error) {
	i, ok := l.byName[name]
	if !ok {
		return store.Node{}, false, nil
	}
	e := l.page[i]
	if l.inodes == nil {
		if err := l.readInodes(ctx); err != nil {
			return store.Node{}, false, err
		}
	}
	a, ok := l.inodes[e.Ino]
	if !ok || a.Type != e.Type {
		return store.Node{}, false, nil // missing or inconsistent inode
	}
	return store.Node{Dentry: e, Attr: a}, true, nil
}

// readInodes reads the attributes of the page's entries, with one mget.
func (l *Listing) readInodes(ctx context.Context) error {
	f := l.f
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	gen := f.cache.Gen()
	l.inodes = make(map[uint64]store.Inode, len(l.page))
	inos := make([]uint64, 0, len(l.page))
	names := make([]string, 0, len(l.page))
	// Subdirectories under delegations of their own learn their
	// attributes from the read, which comes after those grants.
	subs := map[uint64]*dirState{}
	watch := map[uint64]string{} // subdirectories other mounts may write
	changes := map[uint64]uint64{}
	for _, de := range l.page {
		if a, ok := f.wb.inode(de.Ino); ok {
			l.inodes[de.Ino] = a // made here, not flushed yet
			continue
		}
		if a, ok := l.held(de); ok {
			l.inodes[de.Ino] = a // a delegation holds them
			continue
		}
		if de.Type == store.TypeDir {
			if sub := f.delegs.state(de.Ino); sub != nil {
				subs[de.Ino], changes[de.Ino] = sub, sub.changeCount()
			} else if f.watched(de.Ino) {
				watch[de.Ino] = store.Join(l.path, de.Name)
			}
		}
		inos, names = append(inos, de.Ino), append(names, de.Name)
	}
	// A listing read ahead reads the directory's own attributes with its
	// first page's, for the walk's stat of it.
	own, ownChanges := l.ahead && l.st != nil && !l.ownRead, uint64(0)
	if own {
		l.ownRead, ownChanges = true, l.st.changeCount()
		inos, names = append(inos, l.dir.Ino()), append(names, "")
	}
	if len(inos) == 0 {
		return nil
	}
	res, err := f.inodesNow(ctx, inos, watch)
	if err != nil {
		l.inodes = nil
		return err
	}
	if own {
		if r := res[len(res)-1]; r.Err == nil {
			l.st.learnSelf(r.Inode, ownChanges)
		}
		res, inos, names = res[:len(res)-1], inos[:len(inos)-1], names[:len(names)-1]
	}
	for k, r := range res {
		if r.Err != nil {
			continue
		}
		l.inodes[inos[k]] = r.Inode
		if l.st != nil {
			f.delegs.learnAttr(l.st, names[k], r.Inode)
		}
		if sub := subs[inos[k]]; sub != nil {
			sub.learnSelf(r.Inode, changes[inos[k]])
		}
		if l.fromMem {
			// The paths of a listing from memory were not read
			// now: only the attributes are fresh.
			f.cache.PutInode(r.Inode, gen)
		} else {
			f.cache.PutNode(store.Node{Dentry: l.page[l.byName[names[k]]], Attr: r.Inode}, gen)
		}
	}
	return nil
}

// held returns the attributes of entry e if a delegation holds them: a
// directory's own, a file's its directory's (when this listing is made
// under it).
func (l *Listing) held(e store.Dentry) (store.Inode, bool) {
	f := l.f
	if f.delegs == nil {
		return store.Inode{}, false
	}
	if e.Type == store.TypeDir {
		return f.wb.overlay(e.Ino, func() (store.Inode, bool) { return f.delegs.selfAttr(e.Ino, nil) })
	}
	if l.st == nil {
		return store.Inode{}, false
	}
	return f.delegs.attr(l.dir.Ino(), e.Name, e.Ino, nil)
}

// Kept says whether the kernel may keep what this listing answers: with
// delegations, only if it is made under the directory's (see Tell). When
// it may not, readdirplus gives the kernel names alone, and reading the
// entries' attributes (an _mget a page) would be for nothing.
func (l *Listing) Kept() bool { return l.st != nil || l.f.delegs == nil }

// Tell is told for an answer about name from this listing being given to
// the kernel, whose node for the directory is kn: kept says whether the
// kernel may keep it (it was read under the directory's delegation, not
// revoked since, whose recall makes the kernel forget it), and done is to
// be called once the reply is made. With delegations off the mount's
// timeouts apply, whatever kept says.
func (l *Listing) Tell(name string, kn KernelNode) (kept bool, done func()) {
	switch {
	case l.st != nil:
		if l.st.told(name, kn) {
			return true, l.st.done
		}
		return false, noDone
	case l.f.delegs != nil:
		return false, noDone
	}
	return true, noDone
}
