package fs

// Open file descriptions (handle): OPEN and RELEASE, as the kernel asks
// them; the state they share is openFile (file.go).

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// handle is one open file description.
type handle struct {
	of     *openFile
	append bool
	write  bool
	// locks: the owners that took advisory locks through this open file
	// (filelock.go).
	locks lockOwners
	// since: the write-back errors this description has reported
	// (errseq.go).
	since errSince
}

var (
	_ = (gofs.FileReader)((*handle)(nil))
	_ = (gofs.FileWriter)((*handle)(nil))
	_ = (gofs.FileFlusher)((*handle)(nil))
	_ = (gofs.FileFsyncer)((*handle)(nil))
	_ = (gofs.FileReleaser)((*handle)(nil))
	_ = (gofs.FileLseeker)((*handle)(nil))
)

// openHandle opens ino: it reads the inode afresh (close-to-open
// consistency: an open sees everything flushed before it, on any mount).
// created says that this mount has just made the inode, with the first
// data generation (store.Inode.Dgen 1): nobody else can have written it,
// so its first writer owns that generation without a round trip. Counter
// 1 of it is the pending batch's (the chunks it holds, see
// writeback.take): the writer starts above it, or those chunks would
// refuse its writes and truncates as their equals.
func (f *FS) openHandle(ctx context.Context, a store.Inode, flags uint32, created bool) (*handle, error) {
	f.mu.Lock()
	of := f.open[a.Ino]
	if of == nil {
		of = &openFile{f: f, ino: a.Ino, attr: a, size: a.Size, clean: map[int64][]byte{}, dirty: map[int64][]byte{}}
		if created && a.Dgen == 1 {
			of.w.gen, of.w.counter = 1, 1
		}
		f.open[a.Ino] = of
	}
	of.refs++
	f.mu.Unlock()

	of.mu.Lock()
	if !of.changed && len(of.dirty) == 0 {
		// Nothing buffered here: take the stored state as it is now, and
		// forget cached chunks, which another mount may have rewritten.
		of.attr, of.size = a, a.Size
		of.clean, of.cleanLRU = map[int64][]byte{}, nil
		of.cgen++
	}
	of.mu.Unlock()
	h := &handle{of: of, append: flags&syscall.O_APPEND != 0, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY,
		since: f.errs.sample(a.Ino)}
	return h, nil
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	writing := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if n.f.opts.ReadOnly && writing {
		return nil, 0, syscall.EROFS
	}
	a, err := n.f.freshInode(ctx, n.ino())
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, syscall.ESTALE
	}
	if err != nil {
		return nil, 0, n.f.toErrno("open", err)
	}
	h, err := n.f.openHandle(ctx, a, flags, false)
	if err != nil {
		return nil, 0, n.f.toErrno("open", err)
	}
	if flags&syscall.O_TRUNC != 0 && a.Size > 0 {
		// Through the open state, whose data generation the writes that
		// usually follow then reuse.
		if err := n.f.truncate(ctx, a.Ino, 0, &a); err != nil {
			h.Release(ctx)
			return nil, 0, n.f.toErrno("open", err)
		}
	}
	return h, 0, 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	of := h.of
	f := of.f
	ctx, cancel := context.WithTimeout(context.Background(), 4*f.st.Timeout())
	defer cancel()
	if h.locks.any() {
		f.releaseHandleLocks(ctx, of.ino, &h.locks)
		f.co.FileLocks.Forget(of.ino)
	}
	of.mu.Lock()
	err := of.flush(ctx)
	f.mu.Lock()
	of.refs--
	last := of.refs == 0
	if last {
		delete(f.open, of.ino)
	}
	f.mu.Unlock()
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
	return f.toErrno("release", err)
}
