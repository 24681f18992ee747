package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/esfs/esfs/store"
)

// Write writes data at off (at the end if the description appends) and
// returns how much it wrote: all of it, or an error.
func (h *Handle) Write(ctx context.Context, data []byte, off int64) (uint32, error) {
	of := h.of
	if of.f.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	if h.lockLost() {
		return 0, syscall.EIO
	}
	uid, _ := caller(ctx)
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.f.closed.Load() {
		return 0, syscall.EIO // checked under of.mu: Close's flush takes it after
	}
	if err := of.owed(ctx); err != nil {
		return 0, err
	}
	if !of.f.wb.pending(of.ino) {
		if err := of.staleWrites(); err != nil {
			return 0, err
		}
	} else if of.f.wb.doomed() {
		// Made in memory under a session declared dead since: the
		// batch that holds the file is lost at its next flush (asked
		// for now), and so would this write be.
		of.f.wb.flushSoon()
		return 0, syscall.EIO
	}
	if h.append {
		// At the end as stored now, which another mount may have
		// moved (see rebase.go).
		if err := of.revalidate(ctx); err != nil {
			return 0, err
		}
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
					return 0, err
				}
				b = append([]byte(nil), old...)
			}
			// The chunk's bytes beyond the file's end are stale if the file
			// was truncated and the chunk not rewritten: cut them.
			if limit := of.size - c*cs; int64(len(b)) > limit {
				b = b[:max(limit, 0)]
			}
			of.forgetClean(c)
			delete(of.spans, c)
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
		of.addSpan(c, within, within+n)
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
	of.wend = max(of.wend, end)
	of.cgen++ // read-ahead in flight may hold the old bytes
	of.mtime = now()
	of.changed = true
	of.dirtied()
	of.killPriv = of.killPriv || uid != 0
	if of.dirtyLen > of.f.opts.DirtyLimit {
		// Send the data but not the inode: the size becomes visible at
		// flush, like any other buffered write.
		if err := of.writeChunks(ctx); err != nil {
			return 0, err
		}
	}
	return uint32(len(data)), nil
}

// truncate sets the size of ino, in the open state if any and in the store:
// chunks past the end are deleted and the last partial chunk is cut, so
// that growing the file later reads zeros, not old bytes. Those are data
// writes, fenced like any other (see dataWriter): a write that lands late
// cannot bring back a chunk past the new end.
//
// fresh, if not nil, is the inode as just read from the store, which
// saves reading it again.
func (f *Mount) truncate(ctx context.Context, ino uint64, size int64, fresh *store.Inode) error {
	switch {
	case size < 0:
		return syscall.EINVAL
	case size > store.MaxFileSize:
		return syscall.EFBIG
	}
	if f.wb.pending(ino) {
		// Its chunks may be held for its batch: cut them in the store.
		if err := f.settle(ctx); err != nil {
			return err
		}
	}
	of := f.openState(ino)
	if of != nil {
		of.mu.Lock()
		defer of.mu.Unlock()
		if err := of.owed(ctx); err != nil {
			return err
		}
		if err := of.writeChunks(ctx); err != nil {
			return err
		}
		// The kernel cuts its pages of a truncate(2) itself, not always
		// those of an open with O_TRUNC: its next open drops them.
		of.dropClean(true)
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
	// A refusal means a write of a version at least as high is stored:
	// this mount's own, sent with a batch or by another descriptor, or
	// another mount's. Whichever it is, it is stored now, before this
	// truncate ends: the truncate is the later one, and cuts it under a
	// newer generation (as writeChunks writes again), which outranks
	// everything stored. A write still in flight with an older
	// generation is then refused, and its writer rewrites it after the
	// truncate, as the later write it is.
	var deleted int64
	uncounted := false // a cut whose outcome is unknown deleted we know not how many
	for attempt, unknown := 0, 0; size < old; attempt++ {
		refused, n, err := f.cut(ctx, ino, size, old, w, base)
		deleted += n
		if errors.Is(err, store.ErrUnavailable) && unknown < resizeTries && ctx.Err() == nil {
			// It may have landed, in part: the bytes past size are then
			// gone, and the size must follow them. Cut again (what
			// landed is found gone) until the cut is known made.
			unknown++
			uncounted = true
			store.Backoff(ctx, unknown+6, time.Second)
			attempt--
			continue
		}
		if err != nil {
			return err
		}
		if !refused {
			break
		}
		if attempt+1 >= conflictRetries {
			return fmt.Errorf("truncating inode %d: newer writes kept winning: %w", ino, store.ErrConflict)
		}
		w.gen = 0
	}
	if size > old && (of == nil || of.dirty[old/f.st.ChunkSize()] == nil) {
		// A growth reads zeros past the old end, whatever the chunk it
		// falls in holds there (cutTail). A refusal is a newer write of
		// that chunk, which cut it itself.
		if _, err := f.cutTail(ctx, ino, old, w, base); err != nil {
			return err
		}
	}
	var created int64
	if of != nil {
		created = of.newChunks
	}
	t := now()
	resize := func(a *store.Inode) error {
		a.Size, a.Mtime, a.Ctime = size, t, t
		switch {
		case uncounted:
			a.Chunks = -1
		case a.Chunks >= 0:
			a.Chunks = max(a.Chunks+created-deleted, 0)
		}
		return nil
	}
	a, err := f.updateInodeFrom(ctx, ino, base, resize)
	if errors.Is(err, store.ErrUnavailable) && size < old {
		a, err = f.resizeAfterCut(ctx, ino, size, t, resize, err)
	}
	if err != nil {
		if of != nil && size < old && errors.Is(err, store.ErrUnavailable) {
			// The bytes past size are cut: the file is the truncated
			// one, and its size is owed like a write's, landing at the
			// next flush (whose failure close and fsync report).
			of.size, of.changed, of.mtime = size, true, t
			of.cutOwed, of.cutSize = true, size
			of.dirtied()
			of.wend = min(of.wend, size)
			of.extent = min(of.extent, size)
		}
		return err
	}
	if of != nil {
		of.attr, of.size, of.changed, of.cutOwed = a, size, false, false
		of.wend, of.spans = 0, nil // everything is stored, and sized
		of.extent = min(of.extent, size)
		of.newChunks, of.seekFresh, of.sent = 0, false, nil
	}
	return nil
}

// resizeTries bounds how often a truncate tries to write the size that
// follows its cut when the cluster does not answer.
const resizeTries = 5

// resizeAfterCut writes a truncate's new size after its write met first,
// an unknown outcome (refused with 429 or 5xx, or its answer lost), with
// the chunks past size already cut: the size must follow them, or every
// mount reads the old size with zeros past the new one, neither the file
// before the truncate nor after it. A fresh read tells whether the first
// write landed (its mtime, stamped to the nanosecond, is this truncate's);
// resize is not idempotent (it counts chunks), so it is applied again
// only to an inode the first write did not reach.
func (f *Mount) resizeAfterCut(ctx context.Context, ino uint64, size, mtime int64, resize func(*store.Inode) error, first error) (store.Inode, error) {
	err := first
	for attempt := 0; attempt < resizeTries && ctx.Err() == nil; attempt++ {
		store.Backoff(ctx, attempt+6, time.Second)
		cur, rerr := f.freshInode(ctx, ino)
		if rerr != nil {
			if !errors.Is(rerr, store.ErrUnavailable) {
				return store.Inode{}, rerr
			}
			continue
		}
		if cur.Size == size && cur.Mtime == mtime {
			f.delegs.updateAttr(ino, cur)
			return cur, nil
		}
		var a store.Inode
		if a, err = f.updateInodeFrom(ctx, ino, &cur, resize); !errors.Is(err, store.ErrUnavailable) {
			return a, err
		}
	}
	return store.Inode{}, err
}

// cut removes what the store holds of ino past size, in a file that was
// old bytes long: the last partial chunk is written again shorter (read
// first: its bytes before size stand) and the chunks past it are
// deleted, each request stamped by w (whose generation is allocated from
// base if it has none). It reports whether any of it was refused by a
// write of a version at least as high, and how many chunks it deleted.
func (f *Mount) cut(ctx context.Context, ino uint64, size, old int64, w *dataWriter, base *store.Inode) (refused bool, deleted int64, err error) {
	refused, err = f.cutTail(ctx, ino, size, w, base)
	if err != nil {
		return false, 0, err
	}
	cs := f.st.ChunkSize()
	st, err := w.stamp(ctx, f, base)
	if err != nil {
		return false, 0, err
	}
	d, err := f.st.TryDeleteChunks(ctx, ino, (size+cs-1)/cs, (old-1)/cs, st.Version)
	return refused || len(d.Refused) > 0, d.Count, err
}

// cutTail writes the chunk end falls in again without what it holds past
// end, if it holds anything there (one read, and a write only then):
// bytes past the end of file that a growth of the file would expose. A
// truncate down cuts them; a growth has them too, for what lies past the
// stored end is not always nothing: the chunk of a flush whose answer was
// lost and whose undo the cluster refused as well (campaign seed
// 450358988), or of a writer killed between its chunks and its size.
// refused: a newer write of the chunk is stored (see cut).
func (f *Mount) cutTail(ctx context.Context, ino uint64, end int64, w *dataWriter, base *store.Inode) (refused bool, err error) {
	cs := f.st.ChunkSize()
	if end%cs == 0 {
		return false, nil
	}
	c := end / cs
	got, _, err := f.st.ReadChunks(ctx, ino, c, c)
	if err != nil {
		return false, err
	}
	b, ok := got[c]
	if !ok || int64(len(b)) <= end-c*cs {
		return false, nil
	}
	st, err := w.stamp(ctx, f, base)
	if err != nil {
		return false, err
	}
	wr, err := f.st.WriteChunks(ctx, ino, map[int64][]byte{c: b[:end-c*cs]}, st)
	if err != nil {
		return false, err
	}
	return len(wr.Refused) > 0, nil
}
