package vfs

// Open file descriptions (Handle): open, read, write, flush, fsync and the
// last close, as the kernel asks them; the state a file's descriptions
// share is openFile (file.go).

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
)

// Handle is one open file description.
type Handle struct {
	of     *openFile
	append bool
	write  bool
	// locks: the owners that took advisory locks through this open file
	// (filelock.go).
	locks LockOwners
	// since: the write-back errors this description has reported
	// (errseq.go).
	since ErrSince
	// keepPages: see KeepPages.
	keepPages bool
}

// Ino is the inode the description is open on.
func (h *Handle) Ino() uint64 { return h.of.ino }

// Locks are the owners that took advisory locks through this description.
func (h *Handle) Locks() *LockOwners { return &h.locks }

// openHandle opens ino: it reads the inode afresh (close-to-open
// consistency: an open sees everything flushed before it, on any mount).
// created says that this mount has just made the inode, with the first
// data generation (store.Inode.Dgen 1): nobody else can have written it,
// so its first writer owns that generation without a round trip. Counter
// 1 of it is the pending batch's (the chunks it holds, see
// writeback.take): the writer starts above it, or those chunks would
// refuse its writes and truncates as their equals.
func (f *Mount) openHandle(ctx context.Context, a store.Inode, flags uint32, created bool) (*Handle, error) {
	return f.openHandleRead(ctx, a, openRead{}, flags, created)
}

// openRead is what an open read of the file with its inode, in the same
// round trip (clean.go): the data versions of the chunks this mount keeps
// of it since its last close here (vers; nil: not read), or its first
// chunk (withFirst; first nil: not stored) at data version firstVer.
type openRead struct {
	vers      map[int64]int64
	first     []byte
	firstVer  int64
	withFirst bool
}

// openHandleRead is openHandle for an open that read a, and rd with it.
// Which open's read the open file takes is decided by versions, not by
// which answer came last: see "What the mount keeps of a file's bytes" in
// doc.go.
func (f *Mount) openHandleRead(ctx context.Context, a store.Inode, rd openRead, flags uint32, created bool) (*Handle, error) {
	f.mu.Lock()
	of := f.open[a.Ino]
	first := of == nil
	if first {
		of = &openFile{f: f, ino: a.Ino, attr: a, size: a.Size, clean: map[int64][]byte{}, dirty: map[int64][]byte{}}
		if created && a.Dgen == 1 {
			of.w.gen, of.w.counter = 1, 1
		}
		f.open[a.Ino] = of
	}
	of.refs++
	f.mu.Unlock()

	keepPages := false
	of.mu.Lock()
	switch {
	case of.changed || len(of.dirty) > 0:
		// What this mount has buffered is newer than any read of the
		// store; its flush rebases on what changed meanwhile.
	case first:
		// The chunks kept since the file's last close here are kept
		// again where their versions, read with the inode, say they are
		// still right (clean.go).
		keepPages = of.adoptKept(a, rd.vers)
		of.attr, of.size = a, a.Size
		of.takeFirst(a, rd)
	case olderRead(a, of.attr):
		// Read before what the open file holds (another open's read
		// answered first, or this mount's own flush since): taken, it
		// would roll back what descriptors have already read. The open
		// file is at least as new as this open may see.
	default:
		// Take the stored state as it is now. The chunks read through a
		// description open meanwhile are forgotten, as another mount may
		// have rewritten them without changing the inode (a close that
		// failed after its chunks landed, a writer past its dirty limit);
		// the kernel drops its pages at this open too.
		of.dropClean(false)
		if newer(a.Ver, of.attr.Ver) || !a.Ver.Known() {
			// A chunk read with an inode no newer than the open file's
			// may be older than one a descriptor has read since (a
			// rewrite that left the inode as it was): the next read
			// asks the store.
			of.takeFirst(a, rd)
		}
		of.attr, of.size = a, a.Size
	}
	if flags&syscall.O_TRUNC != 0 {
		keepPages = false
	}
	if !keepPages {
		of.kernelStale = false // the kernel drops its pages at this open
	}
	of.mu.Unlock()
	h := &Handle{of: of, append: flags&syscall.O_APPEND != 0, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY,
		since: f.errs.sample(a.Ino), keepPages: keepPages}
	return h, nil
}

// olderRead says whether a, an inode an open read, is older than have,
// what the open file holds of it: both versions known (a file made in
// memory here has none until its batch lands), and have's later in the
// document's history.
func olderRead(a, have store.Inode) bool {
	return a.Ver.Known() && have.Ver.Known() && newer(have.Ver, a.Ver)
}

// KeepPages says whether the kernel may keep the pages it has of the file
// at this open (FOPEN_KEEP_CACHE): the file is as it was when it was last
// open here, every chunk the kernel was given checked (clean.go).
func (h *Handle) KeepPages() bool { return h.keepPages }

// Open opens inode ino with open(2)'s flags; ESTALE if it is gone.
func (f *Mount) Open(ctx context.Context, ino uint64, flags uint32) (*Handle, error) {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	writing := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if f.opts.ReadOnly && writing {
		return nil, syscall.EROFS
	}
	// The inode, read afresh (close-to-open), and with it the first chunk
	// for a reader, or the versions of the chunks kept since the last
	// close here (clean.go).
	var a store.Inode
	var rd openRead
	var err error
	withVers := false
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && f.firstChunkWanted(ino) {
		a, rd.first, rd.firstVer, rd.withFirst, err = f.inodeAndFirstChunk(ctx, ino)
	} else if a, rd.vers, withVers, err = f.inodeAndKeptVersions(ctx, ino); err == nil && !withVers {
		a, err = f.freshInode(ctx, ino)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, syscall.ESTALE
	}
	if err != nil {
		return nil, err
	}
	h, err := f.openHandleRead(ctx, a, rd, flags, false)
	if err != nil {
		return nil, err
	}
	if flags&syscall.O_TRUNC != 0 && a.Size > 0 {
		// Through the open state, whose data generation the writes that
		// usually follow then reuse.
		if err := f.truncate(ctx, a.Ino, 0, &a); err != nil {
			_ = h.Release()
			return nil, err
		}
	}
	return h, nil
}

// ReleaseLocks gives back the flocks and OFD locks taken through the
// description, the first thing its last close does (Release; the kernel
// layer calls it alone first, to let lock requests waiting for it go on
// while the rest of the release flushes).
func (h *Handle) ReleaseLocks() {
	if !h.locks.any() {
		return
	}
	f := h.of.f
	ctx, cancel := context.WithTimeout(context.Background(), 4*f.st.Timeout())
	defer cancel()
	f.ReleaseLocks(ctx, h.of.ino, &h.locks)
	f.co.FileLocks.Forget(h.of.ino)
}

// Release is the last close of the description: the locks taken through
// it go, what is buffered is flushed, and an unlinked file's inode goes
// with its last description.
func (h *Handle) Release() error {
	h.ReleaseLocks()
	of := h.of
	f := of.f
	ctx, cancel := context.WithTimeout(context.Background(), 4*f.st.Timeout())
	defer cancel()
	of.mu.Lock()
	err := of.flush(ctx)
	f.mu.Lock()
	of.refs--
	last := of.refs == 0
	if last {
		delete(f.open, of.ino)
	}
	f.mu.Unlock()
	if last {
		of.keepClosed()
	}
	unlinked, attr := of.unlinked, of.attr
	of.mu.Unlock()
	if err != nil {
		f.log.Error("data lost at close: flush failed", "ino", of.ino, "err", err)
	}
	if last {
		f.errs.forget(of.ino)
	}
	if last && unlinked {
		attr.Size = max(attr.Size, of.size, of.extent)
		if derr := f.deleteInode(ctx, attr); derr != nil {
			f.log.Warn("could not delete an unlinked inode at last close", "ino", of.ino, "err", derr)
		}
	}
	return err
}

// Flush is a close(2) of a descriptor of this description: what it wrote
// lands, then the closing process's record locks on the file go (owner,
// when the kernel said whose close it is).
func (h *Handle) Flush(ctx context.Context, owner uint64, hasOwner bool) error {
	of := h.of
	if h.lockLost() {
		return syscall.EIO
	}
	if hasOwner {
		defer of.f.releaseOwnerLocks(ctx, of.ino, owner)
	}
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	err := of.flush(ctx)
	of.mu.Unlock()
	// What this description has not reported yet (errseq.go); a failure
	// of this flush was recorded first, and is reported once.
	if rerr := of.f.errs.check(of.ino, &h.since, false); err == nil {
		err = rerr
	}
	return err
}

// Fsync makes the file durable, and with it everything this mount made in
// memory (see writeback.go): the file's name may be pending.
func (h *Handle) Fsync(ctx context.Context) error {
	if err := h.Flush(ctx, 0, false); err != nil {
		return err
	}
	ctx, cancel := h.of.f.ctxOf(ctx)
	defer cancel()
	return h.of.f.sync(ctx, h.of.ino, &h.since)
}

// SyncInode is fsync(2) of a directory or of a node without a description:
// every change is durable once what is pending in memory is. since is what
// the directory's description has reported (nil: none open).
func (f *Mount) SyncInode(ctx context.Context, ino uint64, since *ErrSince) error {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	if since == nil {
		s := f.errs.sample(ino)
		since = &s
	}
	return f.sync(ctx, ino, since)
}

// flushData writes what this handle's file has buffered (chunks and size).
func (h *Handle) flushData(ctx context.Context) error {
	of := h.of
	of.mu.Lock()
	defer of.mu.Unlock()
	return of.flush(ctx)
}
