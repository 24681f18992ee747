package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// openFile is the state of an inode that has open handles in this mount.
// Written data is buffered here per chunk and sent to the store on flush,
// fsync, close, or when the buffer exceeds the dirty limit.
type openFile struct {
	f   *FS
	ino uint64

	mu sync.Mutex // protects the following; held across store I/O of this file
	// INVARIANT: refs > 0 while the openFile is in FS.open.
	refs     int
	attr     store.Inode // as last read or written
	size     int64       // current size, including buffered writes
	dirty    map[int64][]byte
	dirtyLen int64
	// changed: size or mtime differ from the stored inode.
	changed bool
	mtime   int64
	// clean holds a few recently read chunks for sequential reads.
	clean    map[int64][]byte
	cleanLRU []int64
	// extent is the end of the data this mount has sent to the store, which
	// can pass attr.Size until the inode is written at flush.
	extent   int64
	unlinked bool // no links left: delete the inode at the last close
	// killPriv: a caller other than root wrote since the last flush, so
	// the flush clears setuid (and setgid with group execute), as the
	// kernel does for callers without CAP_FSETID.
	killPriv bool
	sticky   error // a failed background flush, reported at the next flush
	// Read-ahead for sequential readers: nextSeq is the chunk a
	// sequential reader asks for next, aheadTo the end of what was asked
	// of the store already, ahead the chunks on their way (closed when
	// they arrived). cgen changes with the content (writes, truncation,
	// reopening): chunks read before a change are dropped on arrival.
	nextSeq int64
	aheadTo int64
	ahead   map[int64]chan struct{}
	cgen    uint64
}

// cleanChunks bounds the chunks an open file keeps after reading them;
// readAhead is how many chunks past the one asked for a sequential reader
// gets fetched in the background (one request), so that the store works
// while the kernel consumes.
const (
	cleanChunks = 16
	readAhead   = 8
	aheadPer    = 2 // chunks per read-ahead request
)

// FlushAll makes the buffered writes of every open file durable.
func (f *FS) FlushAll(ctx context.Context) error {
	f.mu.Lock()
	files := make([]*openFile, 0, len(f.open))
	for _, of := range f.open {
		files = append(files, of)
	}
	f.mu.Unlock()
	var first error
	for _, of := range files {
		of.mu.Lock()
		err := of.flush(ctx)
		of.mu.Unlock()
		if err != nil && first == nil {
			first = fmt.Errorf("flushing inode %d: %w", of.ino, err)
		}
	}
	return first
}

// openState returns the open state of ino in this mount, or nil.
func (f *FS) openState(ino uint64) *openFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open[ino]
}

func (of *openFile) currentSize(stored int64) int64 {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.changed {
		return of.size
	}
	return stored
}

func (of *openFile) lastAttr() store.Inode {
	of.mu.Lock()
	defer of.mu.Unlock()
	a := of.attr
	a.Size = of.size
	a.Nlink = 0
	return a
}

func (of *openFile) setMtime(t int64) {
	of.mu.Lock()
	defer of.mu.Unlock()
	of.mtime = t
	of.attr.Mtime = t
}

// markUnlinked records that the last link is gone; it reports true when the
// inode must outlive its links because handles are open.
func (of *openFile) markUnlinked(a store.Inode) bool {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.refs == 0 {
		return false
	}
	of.unlinked = true
	of.attr = a
	return true
}

// handle is one open file description.
type handle struct {
	of     *openFile
	append bool
	write  bool
}

var (
	_ = (gofs.FileReader)((*handle)(nil))
	_ = (gofs.FileWriter)((*handle)(nil))
	_ = (gofs.FileFlusher)((*handle)(nil))
	_ = (gofs.FileFsyncer)((*handle)(nil))
	_ = (gofs.FileReleaser)((*handle)(nil))
)

// openHandle opens ino: it reads the inode afresh (close-to-open
// consistency: an open sees everything flushed before it, on any mount).
func (f *FS) openHandle(ctx context.Context, a store.Inode, flags uint32) (*handle, error) {
	f.mu.Lock()
	of := f.open[a.Ino]
	if of == nil {
		of = &openFile{f: f, ino: a.Ino, attr: a, size: a.Size, clean: map[int64][]byte{}, dirty: map[int64][]byte{}}
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
	h := &handle{of: of, append: flags&syscall.O_APPEND != 0, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
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
	if flags&syscall.O_TRUNC != 0 && a.Size > 0 {
		if err := n.f.truncate(ctx, a.Ino, 0); err != nil {
			return nil, 0, n.f.toErrno("open", err)
		}
		if a, err = n.f.freshInode(ctx, n.ino()); err != nil {
			return nil, 0, n.f.toErrno("open", err)
		}
	}
	h, err := n.f.openHandle(ctx, a, flags)
	if err != nil {
		return nil, 0, n.f.toErrno("open", err)
	}
	return h, 0, 0
}

// chunk returns the current content of chunk c (nil for a hole), looking in
// the buffers first. Caller holds of.mu.
func (of *openFile) chunk(ctx context.Context, c int64) ([]byte, error) {
	if b, ok := of.dirty[c]; ok {
		return b, nil
	}
	cs := of.f.st.ChunkSize()
	stored := max(of.attr.Size, of.extent)
	of.readAheadFrom(c, (stored+cs-1)/cs)
	for {
		if b, ok := of.clean[c]; ok {
			return b, nil
		}
		ch, coming := of.ahead[c]
		if !coming {
			break
		}
		of.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		of.mu.Lock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if b, ok := of.dirty[c]; ok {
			return b, nil // written while we waited
		}
	}
	if c*cs >= stored {
		return nil, nil // beyond the stored end: nothing stored there
	}
	// Read ahead: the chunks a sequential reader wants next come in the
	// same round trip (unless they are on their way already).
	last := min(c+1, (stored-1)/cs)
	if _, coming := of.ahead[last]; coming && last > c {
		last = c
	}
	got, err := of.f.st.ReadChunks(ctx, of.ino, c, last)
	if err != nil {
		return nil, err
	}
	for k := c; k <= last; k++ {
		if _, isDirty := of.dirty[k]; !isDirty {
			of.remember(k, got[k])
		}
	}
	return got[c], nil
}

// readAheadFrom notes a read of chunk c (of a file of chunks chunks) and,
// when the reads are sequential, asks the store in the background for the
// chunks the reader will want next. Caller holds of.mu.
func (of *openFile) readAheadFrom(c, chunks int64) {
	switch {
	case c == of.nextSeq-1:
		return // the same chunk again: the kernel reads less than a chunk at a time
	case c != of.nextSeq:
		of.nextSeq, of.aheadTo = c+1, c+1 // not sequential (yet)
		return
	}
	of.nextSeq = c + 1
	if of.aheadTo-c > readAhead/2 {
		return // enough on its way
	}
	from := max(of.aheadTo, c+1)
	to := min(c+1+readAhead, chunks)
	for from < to {
		if _, ok := of.clean[from]; !ok {
			break
		}
		from++
	}
	if from >= to {
		return
	}
	if of.ahead == nil {
		of.ahead = map[int64]chan struct{}{}
	}
	// A few requests side by side: one large mget keeps one node thread
	// busy decoding, several keep the cluster (and our decoding) parallel.
	for lo := from; lo < to; lo += aheadPer {
		hi := min(lo+aheadPer, to)
		ch := make(chan struct{})
		for k := lo; k < hi; k++ {
			of.ahead[k] = ch
		}
		go of.fetchAhead(lo, hi, of.cgen, ch)
	}
	of.aheadTo = to
}

func (of *openFile) fetchAhead(from, to int64, gen uint64, ch chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*of.f.st.Timeout())
	defer cancel()
	got, err := of.f.st.ReadChunks(ctx, of.ino, from, to-1)
	of.mu.Lock()
	defer of.mu.Unlock()
	for k := from; k < to; k++ {
		if of.ahead[k] == ch {
			delete(of.ahead, k)
		}
	}
	close(ch)
	if err != nil || gen != of.cgen {
		// A reader that wanted these reads them itself; stale ones must
		// not be kept.
		of.aheadTo = min(of.aheadTo, from)
		return
	}
	for k := from; k < to; k++ {
		if _, isDirty := of.dirty[k]; !isDirty {
			of.remember(k, got[k])
		}
	}
}

func (of *openFile) remember(c int64, b []byte) {
	if _, ok := of.clean[c]; !ok {
		of.cleanLRU = append(of.cleanLRU, c)
	}
	of.clean[c] = b
	for len(of.cleanLRU) > cleanChunks {
		delete(of.clean, of.cleanLRU[0])
		of.cleanLRU = of.cleanLRU[1:]
	}
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	of := h.of
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	if off >= of.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), of.size)
	cs := of.f.st.ChunkSize()
	out := dest[:end-off]
	for pos := off; pos < end; {
		c := pos / cs
		within := pos - c*cs
		n := min(cs-within, end-pos)
		b, err := of.chunk(ctx, c)
		if err != nil {
			return nil, of.f.toErrno("read", err)
		}
		dst := out[pos-off : pos-off+n]
		copied := 0
		if within < int64(len(b)) {
			copied = copy(dst, b[within:])
		}
		clear(dst[copied:]) // holes and short chunks read as zeros
		pos += n
	}
	return fuse.ReadResultData(out), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	of := h.of
	if of.f.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	uid, _ := caller(ctx)
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.f.closed.Load() {
		return 0, syscall.EIO // checked under of.mu: Close's flush takes it after
	}
	if h.append {
		off = of.size
	}
	if off < 0 || off+int64(len(data)) > maxFileSize {
		return 0, syscall.EFBIG
	}
	cs := of.f.st.ChunkSize()
	end := off + int64(len(data))
	for pos := off; pos < end; {
		c := pos / cs
		within := pos - c*cs
		n := min(cs-within, end-pos)
		b, ok := of.dirty[c]
		before := int64(len(b))
		if !ok {
			// Read-modify-write, unless the write covers everything the chunk
			// holds.
			if within > 0 || within+n < min(cs, of.size-c*cs) {
				old, err := of.chunk(ctx, c)
				if err != nil {
					return 0, of.f.toErrno("write", err)
				}
				b = append([]byte(nil), old...)
			}
			// The chunk's bytes beyond the file's end are stale if the file
			// was truncated and the chunk not rewritten: cut them.
			if limit := of.size - c*cs; int64(len(b)) > limit {
				b = b[:max(limit, 0)]
			}
			delete(of.clean, c)
		}
		if int64(len(b)) < within+n {
			if int64(cap(b)) >= within+n {
				b = b[:within+n]
			} else {
				nb := make([]byte, within+n, min(cs, max(within+n, 2*int64(len(b)))))
				copy(nb, b)
				b = nb
			}
		}
		copy(b[within:within+n], data[pos-off:pos-off+n])
		// Count what the chunk grew by: a chunk filled by many small
		// sequential writes must count whole, or the dirty limit is
		// passed many times over before a flush.
		of.dirtyLen += int64(len(b)) - before
		of.dirty[c] = b
		pos += n
	}
	if end > of.size {
		of.size = end
	}
	of.cgen++ // read-ahead in flight may hold the old bytes
	of.mtime = now()
	of.changed = true
	of.killPriv = of.killPriv || uid != 0
	if of.dirtyLen > of.f.opts.DirtyLimit {
		// Send the data but not the inode: the size becomes visible at
		// flush, like any other buffered write.
		if err := of.writeChunks(ctx); err != nil {
			return 0, of.f.toErrno("write", err)
		}
	}
	return uint32(len(data)), 0
}

// maxFileSize bounds offsets so that chunk numbers and sizes stay far from
// overflow (8 EiB would be the type's limit).
const maxFileSize = 1 << 50

// writeChunks sends the dirty chunks to the store. Caller holds of.mu.
func (of *openFile) writeChunks(ctx context.Context) error {
	if len(of.dirty) == 0 {
		return nil
	}
	if err := of.f.st.WriteChunks(ctx, of.ino, of.dirty); err != nil {
		return err
	}
	cs := of.f.st.ChunkSize()
	for c, b := range of.dirty {
		of.extent = max(of.extent, c*cs+int64(len(b)))
		of.remember(c, b)
	}
	of.dirty, of.dirtyLen = map[int64][]byte{}, 0
	return nil
}

// flush makes everything written through this mount durable: chunks first,
// then the inode (size, mtime) with compare-and-set. Caller holds of.mu.
func (of *openFile) flush(ctx context.Context) error {
	if of.sticky != nil {
		err := of.sticky
		of.sticky = nil
		return err
	}
	if err := of.writeChunks(ctx); err != nil {
		return err
	}
	if !of.changed || of.unlinked {
		return nil
	}
	size, mtime, killPriv := of.size, of.mtime, of.killPriv
	a, err := of.f.updateInode(ctx, of.ino, func(a *store.Inode) error {
		a.Size = size
		if mtime > a.Mtime {
			a.Mtime = mtime
		}
		a.Ctime = max(a.Ctime, mtime)
		// Writing clears setuid, and setgid with group execute, unless
		// root wrote, as on any POSIX filesystem. The kernel asks for it
		// too, but only when its cached mode (maybe older than another
		// mount's chmod) has the bits.
		if killPriv {
			a.Mode &^= syscall.S_ISUID
			if a.Mode&0o010 != 0 {
				a.Mode &^= syscall.S_ISGID
			}
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil // removed by another mount meanwhile: nothing to size
	}
	if err != nil {
		return err
	}
	of.attr = a
	of.changed, of.killPriv = false, false
	return nil
}

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	of := h.of
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	return of.f.toErrno("flush", of.flush(ctx))
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.Flush(ctx)
}

func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	return 0 // directories and handle-less nodes: every change is already durable
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
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
	unlinked, attr := of.unlinked, of.attr
	of.mu.Unlock()
	if err != nil {
		f.log.Error("data lost at close: flush failed", "ino", of.ino, "err", err)
	}
	if last && unlinked {
		attr.Size = max(attr.Size, of.size)
		if derr := f.deleteInode(ctx, attr); derr != nil {
			f.log.Warn("could not delete an unlinked inode at last close", "ino", of.ino, "err", derr)
		}
	}
	return f.toErrno("release", err)
}

// truncate sets the size of ino, in the open state if any and in the store:
// chunks past the end are deleted and the last partial chunk is cut, so
// that growing the file later reads zeros, not old bytes.
func (f *FS) truncate(ctx context.Context, ino uint64, size int64) error {
	if size < 0 || size > maxFileSize {
		return syscall.EINVAL
	}
	cs := f.st.ChunkSize()
	of := f.openState(ino)
	if of != nil {
		of.mu.Lock()
		defer of.mu.Unlock()
		if err := of.writeChunks(ctx); err != nil {
			return err
		}
		of.clean, of.cleanLRU = map[int64][]byte{}, nil
		of.cgen++
	}
	a, err := f.freshInode(ctx, ino)
	if err != nil {
		return err
	}
	if a.Type != store.TypeFile {
		return syscall.EINVAL
	}
	old := a.Size
	if of != nil {
		old = max(old, of.size)
	}
	if size < old {
		if size%cs != 0 {
			c := size / cs
			got, err := f.st.ReadChunks(ctx, ino, c, c)
			if err != nil {
				return err
			}
			if b, ok := got[c]; ok && int64(len(b)) > size-c*cs {
				if err := f.st.WriteChunks(ctx, ino, map[int64][]byte{c: b[:size-c*cs]}); err != nil {
					return err
				}
			}
		}
		first := (size + cs - 1) / cs
		if err := f.st.DeleteChunks(ctx, ino, first, (old-1)/cs); err != nil {
			return err
		}
	}
	t := now()
	a, err = f.updateInode(ctx, ino, func(a *store.Inode) error {
		a.Size, a.Mtime, a.Ctime = size, t, t
		return nil
	})
	if err != nil {
		return err
	}
	if of != nil {
		of.attr, of.size, of.changed = a, size, false
	}
	return nil
}
