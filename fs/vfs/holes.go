package vfs

import (
	"context"
	"math"
	"slices"
	"syscall"

	"github.com/esfs/esfs/store"
)

// Lseek answers SEEK_DATA and SEEK_HOLE from the chunks that exist
// (buffered here or stored), so that cp, tar and rsync copy a sparse file
// in time that follows what it holds. Holes are whole absent chunks; a
// short chunk reads as data, so SEEK_DATA from a hole answers the start of
// the next chunk that holds some: at the block size files report
// (st_blksize is the chunk size: the adapter's fs.FS.fillAttr), as Linux lets a
// filesystem answer. SEEK_SET, SEEK_CUR and SEEK_END never get here: the
// kernel answers them.
func (h *Handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, error) {
	const seekData, seekHole = 3, 4
	of := h.of
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	if of.f.wb.pending(of.ino) {
		// Holes are found in the store, where a pending file is not.
		if err := of.f.settle(ctx); err != nil {
			return 0, err
		}
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if whence != seekData && whence != seekHole {
		return 0, syscall.EINVAL
	}
	if err := of.owed(ctx); err != nil {
		return 0, err
	}
	if off >= uint64(of.size) {
		return 0, syscall.ENXIO
	}
	cs := of.f.st.ChunkSize()
	pos := int64(off)
	c, err := of.nextChunk(ctx, pos/cs, whence == seekData)
	if err != nil {
		return 0, err
	}
	switch {
	case c*cs >= of.size && whence == seekData:
		return 0, syscall.ENXIO // only holes from here to the end
	case c*cs >= of.size:
		return uint64(of.size), nil // the implicit hole at the end
	}
	return uint64(max(pos, c*cs)), nil
}

// maxCopy bounds one copy_file_range request (its answer has 32 bits);
// the caller asks again for the rest, as for any short copy.
const maxCopy = 1 << 30

// CopyRange is copy_file_range(2): it copies a range of one open file
// (in) into another (dst) reading only
// the chunks the source holds, so that copying a sparse file costs what it
// holds: its holes fall past the destination's end, where they read as
// zeros already. Anything else (the destination holds bytes in the range,
// or both are one file) is left to the kernel, which then reads and
// writes (EOPNOTSUPP).
func (f *Mount) CopyRange(ctx context.Context, in *Handle, offIn uint64, dst *Handle, offOut, length uint64) (uint32, error) {
	if in.of == dst.of {
		return 0, syscall.EOPNOTSUPP
	}
	if f.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	if offIn > math.MaxInt64 || offOut > math.MaxInt64 {
		return 0, syscall.EINVAL
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	src := in.of
	if f.wb.pending(src.ino) {
		// The copy reads the source's chunks from the store.
		if err := f.settle(ctx); err != nil {
			return 0, err
		}
	}
	src.mu.Lock()
	err := src.owed(ctx)
	size := src.size
	src.mu.Unlock()
	if err != nil {
		return 0, err
	}
	from := int64(offIn)
	if from >= size || length == 0 {
		return 0, nil
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
	err = dst.of.owed(ctx)
	past := int64(offOut) >= dst.of.size
	dst.of.mu.Unlock()
	if err != nil {
		return 0, err
	}
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
			return 0, err
		}
		if len(nums) == 0 {
			break
		}
		for _, k := range nums {
			lo, hi := max(from, k*cs), min(to, (k+1)*cs)
			data, err := in.Read(ctx, buf[:hi-lo], lo)
			if err != nil {
				return 0, err
			}
			if len(data) == 0 {
				continue // the source shrank meanwhile
			}
			if _, err := dst.Write(ctx, data, lo+shift); err != nil {
				return 0, err
			}
		}
		c = nums[len(nums)-1] + 1
	}
	dst.of.extendTo(to + shift) // over the holes at the end of the range
	return uint32(to - from), nil
}

// extendTo makes the file at least end bytes long, as a write ending
// there would.
func (of *openFile) extendTo(end int64) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if end > of.size {
		of.size, of.mtime, of.changed = end, now(), true
		of.cgen++
		of.dirtied()
	}
	of.wend = max(of.wend, end)
}

// dataChunks returns, in order, up to seekPage chunks in [from, to) that
// hold data here (buffered) or in the store. Caller holds of.mu.
func (of *openFile) dataChunks(ctx context.Context, from, to int64) ([]int64, error) {
	if !of.seekFresh {
		if err := of.f.st.Refresh(ctx, store.SearchedData); err != nil {
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
		if err := of.f.st.Refresh(ctx, store.SearchedData); err != nil {
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
