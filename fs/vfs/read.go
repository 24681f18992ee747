package vfs

import (
	"context"
	"syscall"
)

// chunk returns the current content of chunk c (nil for a hole), looking in
// the buffers first. Caller holds of.mu.
func (of *openFile) chunk(ctx context.Context, c int64) ([]byte, error) {
	if b, ok := of.dirty[c]; ok {
		return b, nil
	}
	cs := of.f.st.ChunkSize()
	stored := max(of.attr.Size, of.extent)
	sequential := of.readAheadFrom(c, (stored+cs-1)/cs)
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
		// Beyond the stored end: zeros, without asking. Kept as a chunk
		// read absent (data version 0) is, so that the next open here
		// checks it with the others: another mount's chunk can land
		// there without the inode changing (its close failed after its
		// chunks landed, or it is past its dirty limit), and the
		// kernel's zero pages must then go.
		of.remember(c, nil, 0)
		return nil, nil
	}
	if b, pending := of.f.wb.chunk(of.ino, c); pending {
		of.remember(c, b, -1)
		return b, nil // a pending file: its chunks are in its batch
	}
	// Read ahead: the chunk a sequential reader wants next comes in the
	// same round trip (unless it is on its way already). A random reader
	// gets the one chunk it asked for: the next is as likely as any other.
	last := c
	if sequential {
		last = min(c+1, (stored-1)/cs)
		if _, coming := of.ahead[last]; coming && last > c {
			last = c
		}
	}
	got, vers, err := of.f.st.ReadChunks(ctx, of.ino, c, last)
	if err != nil {
		return nil, err
	}
	for k := c; k <= last; k++ {
		if _, isDirty := of.dirty[k]; !isDirty {
			of.remember(k, got[k], vers[k])
		}
	}
	return got[c], nil
}

// readAheadFrom notes a read of chunk c (of a file of chunks chunks) and,
// when the reads are sequential, asks the store in the background for the
// chunks the reader will want next; it reports whether they are. Caller
// holds of.mu.
func (of *openFile) readAheadFrom(c, chunks int64) (sequential bool) {
	if of.f.wb.pending(of.ino) {
		return false // nothing of it is stored yet
	}
	switch {
	case c == of.nextSeq-1:
		return true // the same chunk again: the kernel reads less than a chunk at a time
	case c != of.nextSeq:
		of.nextSeq, of.aheadTo = c+1, c+1 // not sequential (yet)
		return false
	}
	of.nextSeq = c + 1
	if of.aheadTo-c > readAhead/2 {
		return true // enough on its way
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
		return true
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
	return true
}

func (of *openFile) fetchAhead(from, to int64, gen uint64, ch chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*of.f.st.Timeout())
	defer cancel()
	got, vers, err := of.f.st.ReadChunks(ctx, of.ino, from, to-1)
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
			of.remember(k, got[k], vers[k])
		}
	}
}

// Read reads into dest from off, up to the file's end, and returns what it
// read (a prefix of dest). Holes and short chunks read as zeros.
func (h *Handle) Read(ctx context.Context, dest []byte, off int64) ([]byte, error) {
	of := h.of
	if h.lockLost() {
		return nil, syscall.EIO
	}
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	if err := of.owed(ctx); err != nil {
		return nil, err
	}
	if off >= of.size || len(dest) == 0 {
		return nil, nil
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
			return nil, err
		}
		dst := out[pos-off : pos-off+n]
		copied := 0
		if within < int64(len(b)) {
			copied = copy(dst, b[within:])
		}
		clear(dst[copied:]) // holes and short chunks read as zeros
		pos += n
	}
	return out, nil
}
