package fs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"syscall"

	"github.com/esfs/esfs/locking"
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
	// sticky is a failed write of buffered data (whose bytes were then
	// dropped) not yet reported by a flush or fsync.
	sticky error
	// w numbers this mount's chunk writes to the file (see dataWriter);
	// attr is its compare-and-set base when it allocates a generation.
	w dataWriter
	// newChunks counts the chunks this mount created in the store and has
	// not yet added to the inode's count (store.Inode.Chunks).
	newChunks int64
	// seekFresh: the data index was refreshed for SEEK_DATA/SEEK_HOLE
	// since this mount last wrote chunks of the file.
	seekFresh bool
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

// current returns the size of the file and the number of chunks it
// stores (an upper bound; -1 unknown) as this mount sees them, given the
// stored inode.
func (of *openFile) current(stored store.Inode) (size, chunks int64) {
	of.mu.Lock()
	defer of.mu.Unlock()
	size, chunks = stored.Size, stored.Chunks
	if of.changed {
		size = of.size
	}
	if chunks >= 0 {
		chunks += of.newChunks + int64(len(of.dirty))
	}
	return size, chunks
}

func (of *openFile) lastAttr() store.Inode {
	of.mu.Lock()
	defer of.mu.Unlock()
	a := of.attr
	a.Size = of.size
	a.Nlink = 0
	return a
}

// noteInode gives the open state of a.Ino, if any, the inode as this
// mount just wrote it (a setattr, an xattr), so that the file's next
// compare-and-set (its flush) starts from it instead of failing on it.
// The caller must not hold the file's mu.
func (f *FS) noteInode(a store.Inode) {
	of := f.openState(a.Ino)
	if of == nil {
		return
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if v := of.attr.Ver; a.Ver.PrimaryTerm > v.PrimaryTerm || (a.Ver.PrimaryTerm == v.PrimaryTerm && a.Ver.SeqNo > v.SeqNo) {
		of.attr = a
	}
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
	_ = (gofs.FileLseeker)((*handle)(nil))
)

// openHandle opens ino: it reads the inode afresh (close-to-open
// consistency: an open sees everything flushed before it, on any mount).
// created says that this mount has just made the inode, with the first
// data generation (store.Inode.Dgen 1): nobody else can have written it,
// so its first writer owns that generation without a round trip.
func (f *FS) openHandle(ctx context.Context, a store.Inode, flags uint32, created bool) (*handle, error) {
	f.mu.Lock()
	of := f.open[a.Ino]
	if of == nil {
		of = &openFile{f: f, ino: a.Ino, attr: a, size: a.Size, clean: map[int64][]byte{}, dirty: map[int64][]byte{}}
		if created && a.Dgen == 1 {
			of.w.gen = 1
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
	switch {
	case off < 0:
		return 0, syscall.EINVAL
	case off >= store.MaxFileSize:
		return 0, syscall.EFBIG
	case int64(len(data)) > store.MaxFileSize-off:
		data = data[:store.MaxFileSize-off] // a short write up to the limit, as Linux does
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

// Lseek answers SEEK_DATA and SEEK_HOLE from the chunks that exist
// (buffered here or stored), so that cp, tar and rsync copy a sparse file
// in time that follows what it holds. Holes are whole absent chunks; a
// short chunk reads as data. SEEK_SET, SEEK_CUR and SEEK_END never get
// here: the kernel answers them.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	const seekData, seekHole = 3, 4
	of := h.of
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	if whence != seekData && whence != seekHole {
		return 0, syscall.EINVAL
	}
	if off >= uint64(of.size) {
		return 0, syscall.ENXIO
	}
	cs := of.f.st.ChunkSize()
	pos := int64(off)
	c, err := of.nextChunk(ctx, pos/cs, whence == seekData)
	if err != nil {
		return 0, of.f.toErrno("lseek", err)
	}
	switch {
	case c*cs >= of.size && whence == seekData:
		return 0, syscall.ENXIO // only holes from here to the end
	case c*cs >= of.size:
		return uint64(of.size), 0 // the implicit hole at the end
	}
	return uint64(max(pos, c*cs)), 0
}

var _ = (gofs.NodeCopyFileRanger)((*node)(nil))

// maxCopy bounds one copy_file_range request (its answer has 32 bits);
// the caller asks again for the rest, as for any short copy.
const maxCopy = 1 << 30

// CopyFileRange copies a range of one open file into another reading only
// the chunks the source holds, so that copying a sparse file costs what it
// holds: its holes fall past the destination's end, where they read as
// zeros already. Anything else (the destination holds bytes in the range,
// or both are one file) is left to the kernel, which then reads and
// writes (EOPNOTSUPP).
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode,
	fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*handle)
	dst, ok2 := fhOut.(*handle)
	if !ok1 || !ok2 || in.of == dst.of || flags != 0 {
		return 0, syscall.EOPNOTSUPP
	}
	f := n.f
	if f.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	if offIn > math.MaxInt64 || offOut > math.MaxInt64 {
		return 0, syscall.EINVAL
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	src := in.of
	src.mu.Lock()
	size := src.size
	src.mu.Unlock()
	from := int64(offIn)
	if from >= size || length == 0 {
		return 0, 0
	}
	to := min(from+int64(min(length, maxCopy)), size)
	shift := int64(offOut) - from
	if to+shift > store.MaxFileSize {
		if from+shift >= store.MaxFileSize {
			return 0, syscall.EFBIG
		}
		to = store.MaxFileSize - shift
	}
	dst.of.mu.Lock()
	past := int64(offOut) >= dst.of.size
	dst.of.mu.Unlock()
	if !past {
		return 0, syscall.EOPNOTSUPP
	}
	cs := f.st.ChunkSize()
	buf := make([]byte, cs)
	for c := from / cs; c*cs < to; {
		src.mu.Lock()
		nums, err := src.dataChunks(ctx, c, (to+cs-1)/cs)
		src.mu.Unlock()
		if err != nil {
			return 0, f.toErrno("copy_file_range", err)
		}
		if len(nums) == 0 {
			break
		}
		for _, k := range nums {
			lo, hi := max(from, k*cs), min(to, (k+1)*cs)
			rr, errno := in.Read(ctx, buf[:hi-lo], lo)
			if errno != 0 {
				return 0, errno
			}
			data, _ := rr.Bytes(buf)
			if len(data) == 0 {
				continue // the source shrank meanwhile
			}
			if _, errno := dst.Write(ctx, data, lo+shift); errno != 0 {
				return 0, errno
			}
		}
		c = nums[len(nums)-1] + 1
	}
	dst.of.extendTo(to + shift) // over the holes at the end of the range
	return uint32(to - from), 0
}

// extendTo makes the file at least end bytes long, as a write ending
// there would.
func (of *openFile) extendTo(end int64) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if end > of.size {
		of.size, of.mtime, of.changed = end, now(), true
		of.cgen++
	}
}

// dataChunks returns, in order, up to seekPage chunks in [from, to) that
// hold data here (buffered) or in the store. Caller holds of.mu.
func (of *openFile) dataChunks(ctx context.Context, from, to int64) ([]int64, error) {
	if !of.seekFresh {
		if err := of.f.st.RefreshData(ctx); err != nil {
			return nil, err
		}
		of.seekFresh = true
	}
	stored, err := of.f.st.StoredChunks(ctx, of.ino, from, seekPage)
	if err != nil {
		return nil, err
	}
	bound := to
	if len(stored) == seekPage {
		bound = min(to, stored[len(stored)-1]+1) // the next page brings the rest
	}
	set := map[int64]bool{}
	for _, c := range stored {
		if c < bound {
			set[c] = true
		}
	}
	for c := range of.dirty {
		if c >= from && c < bound {
			set[c] = true
		}
	}
	nums := make([]int64, 0, len(set))
	for c := range set {
		nums = append(nums, c)
	}
	slices.Sort(nums)
	return nums, nil
}

// seekPage is how many stored chunk numbers Lseek asks for at a time.
const seekPage = 1000

// nextChunk returns the first chunk from c on that holds data (data) or
// that does not (!data), or a chunk past the end if there is none. Stored
// chunks are found by search: the data index is refreshed once for the
// open file, and again after this mount wrote chunks of it (other mounts'
// writes are seen as of the open, as close-to-open promises). Caller
// holds of.mu.
func (of *openFile) nextChunk(ctx context.Context, c int64, data bool) (int64, error) {
	cs := of.f.st.ChunkSize()
	end := (of.size + cs - 1) / cs
	if !of.seekFresh {
		if err := of.f.st.RefreshData(ctx); err != nil {
			return 0, err
		}
		of.seekFresh = true
	}
	limit := seekPage
	if data {
		limit = 1
	}
	for c < end {
		stored, err := of.f.st.StoredChunks(ctx, of.ino, c, limit)
		if err != nil {
			return 0, err
		}
		if data {
			// The first of: the next stored chunk, the next buffered one.
			next := end
			if len(stored) > 0 {
				next = stored[0]
			}
			for d := range of.dirty {
				if d >= c && d < next {
					next = d
				}
			}
			return next, nil
		}
		// The first chunk, from c, neither stored nor buffered.
		for _, n := range stored {
			for c < n {
				if _, ok := of.dirty[c]; !ok {
					return c, nil
				}
				c++
			}
			if c == n {
				c++
			}
		}
		if len(stored) < seekPage {
			for c < end {
				if _, ok := of.dirty[c]; !ok {
					return c, nil
				}
				c++
			}
		}
	}
	return end, nil
}

// dataWriter numbers one writer's chunk writes and deletes: a data
// generation allocated by compare-and-set on the inode (so above every
// generation allocated before it, on any mount) and a counter advanced
// with every request, which together make its external version (see
// store.DataVersion). A request this writer gave up on can then never
// overwrite a later one, its own retry or another writer's.
type dataWriter struct {
	gen, counter uint64
}

// stamp returns the stamp of the writer's next request. Without a
// generation (or with its counter spent) it first allocates one, with a
// compare-and-set that starts from *a (a round trip, unless *a is stale)
// and leaves the updated inode in *a.
func (w *dataWriter) stamp(ctx context.Context, f *FS, a *store.Inode) (store.Stamp, error) {
	if w.gen == 0 || w.counter+1 >= 1<<store.DataCounterBits {
		n, err := f.updateInodeFrom(ctx, a.Ino, a, func(n *store.Inode) error {
			if n.Dgen >= store.MaxDataGen {
				return errnoErr(syscall.EFBIG, "inode %d has used every data generation", n.Ino)
			}
			n.Dgen++
			return nil
		})
		if err != nil {
			return store.Stamp{}, err
		}
		*a = n
		w.gen, w.counter = n.Dgen, 0
	}
	w.counter++
	return store.Stamp{Version: store.DataVersion(w.gen, w.counter), Session: f.co.Session().ID()}, nil
}

// conflictRetries bounds how often a chunk write refused because another
// writer took a newer generation meanwhile takes a newer one in turn.
const conflictRetries = 3

// writeChunks sends the dirty chunks to the store. A chunk that a writer
// with a newer generation has written since this one allocated its own is
// written again under a newer generation: this write is the later one.
// When the outcome is unknown (the request failed or timed out), the
// chunks are dropped, as Linux drops dirty pages after a write-back
// error: the error is reported (now and at the next flush), later reads
// see what the store holds, and the request, should it land late, cannot
// overwrite anything written after it. Caller holds of.mu.
func (of *openFile) writeChunks(ctx context.Context) error {
	cs := of.f.st.ChunkSize()
	for attempt := 0; len(of.dirty) > 0; attempt++ {
		st, err := of.w.stamp(ctx, of.f, &of.attr)
		if errors.Is(err, store.ErrNotFound) {
			// Removed by another mount: nobody can read these bytes.
			of.dropDirty()
			return nil
		}
		if err != nil {
			return err // nothing was sent: the chunks stay buffered
		}
		written, err := of.f.st.WriteChunks(ctx, of.ino, of.dirty, st)
		if err != nil {
			of.dropDirty()
			of.sticky = err
			return err
		}
		of.newChunks += written.Created
		of.seekFresh = false
		again := make(map[int64][]byte, len(written.Refused))
		for _, c := range written.Refused {
			again[c] = of.dirty[c]
		}
		for c, b := range of.dirty {
			if _, ok := again[c]; !ok {
				of.extent = max(of.extent, c*cs+int64(len(b)))
				of.remember(c, b)
			}
		}
		of.dirty, of.dirtyLen = again, 0
		for _, b := range again {
			of.dirtyLen += int64(len(b))
		}
		if len(again) > 0 {
			if attempt+1 >= conflictRetries {
				err := fmt.Errorf("chunks of inode %d: newer writes kept winning: %w", of.ino, store.ErrConflict)
				of.dropDirty()
				of.sticky = err
				return err
			}
			of.w.gen = 0 // take a newer generation
		}
	}
	return nil
}

// dropDirty forgets the buffered chunks (see writeChunks); reads then go
// to the store. Caller holds of.mu.
func (of *openFile) dropDirty() {
	for c := range of.dirty {
		delete(of.clean, c)
	}
	of.dirty, of.dirtyLen = map[int64][]byte{}, 0
	of.cgen++
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
		of.sticky = nil // reported now
		return err
	}
	if !of.changed || of.unlinked {
		return nil
	}
	locking.CrashPoint("flush-after-chunks")
	size, mtime, created, killPriv := of.size, of.mtime, of.newChunks, of.killPriv
	a, err := of.f.updateInodeFrom(ctx, of.ino, &of.attr, func(a *store.Inode) error {
		a.Size = size
		if a.Chunks >= 0 {
			a.Chunks += created
		}
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
	of.newChunks = 0
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
		attr.Size = max(attr.Size, of.size, of.extent)
		if derr := f.deleteInode(ctx, attr); derr != nil {
			f.log.Warn("could not delete an unlinked inode at last close", "ino", of.ino, "err", derr)
		}
	}
	return f.toErrno("release", err)
}

// truncate sets the size of ino, in the open state if any and in the store:
// chunks past the end are deleted and the last partial chunk is cut, so
// that growing the file later reads zeros, not old bytes. Those are data
// writes, fenced like any other (see dataWriter): a write that lands late
// cannot bring back a chunk past the new end.
//
// fresh, if not nil, is the inode as just read from the store, which
// saves reading it again.
func (f *FS) truncate(ctx context.Context, ino uint64, size int64, fresh *store.Inode) error {
	switch {
	case size < 0:
		return syscall.EINVAL
	case size > store.MaxFileSize:
		return syscall.EFBIG
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
	var a store.Inode
	if fresh != nil && fresh.Ino == ino {
		a = *fresh
	} else {
		var err error
		if a, err = f.freshInode(ctx, ino); err != nil {
			return err
		}
	}
	if a.Type != store.TypeFile {
		return syscall.EINVAL
	}
	old := a.Size
	w, base := &dataWriter{}, &a
	if of != nil {
		old = max(old, of.size, of.extent)
		of.attr = a
		w, base = &of.w, &of.attr
	}
	if size < old && size%cs != 0 {
		c := size / cs
		got, err := f.st.ReadChunks(ctx, ino, c, c)
		if err != nil {
			return err
		}
		if b, ok := got[c]; ok && int64(len(b)) > size-c*cs {
			st, err := w.stamp(ctx, f, base)
			if err != nil {
				return err
			}
			// Refused: a newer writer rewrote the chunk since, and its
			// bytes stand.
			if _, err := f.st.WriteChunks(ctx, ino, map[int64][]byte{c: b[:size-c*cs]}, st); err != nil {
				return err
			}
		}
	}
	var deleted int64
	if size < old {
		st, err := w.stamp(ctx, f, base)
		if err != nil {
			return err
		}
		if deleted, err = f.st.DeleteChunks(ctx, ino, (size+cs-1)/cs, (old-1)/cs, st.Version); err != nil {
			return err
		}
	}
	var created int64
	if of != nil {
		created = of.newChunks
	}
	t := now()
	a, err := f.updateInodeFrom(ctx, ino, base, func(a *store.Inode) error {
		a.Size, a.Mtime, a.Ctime = size, t, t
		if a.Chunks >= 0 {
			a.Chunks = max(a.Chunks+created-deleted, 0)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if of != nil {
		of.attr, of.size, of.changed = a, size, false
		of.extent = min(of.extent, size)
		of.newChunks, of.seekFresh = 0, false
	}
	return nil
}
