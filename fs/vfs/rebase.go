package vfs

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/esfs/esfs/store"
)

// Other mounts' changes under an open file (close-to-open, as NFS).
//
// An open file buffers its writes per chunk, and a chunk is stored whole:
// a write into part of a chunk first reads the rest of it (or zero-fills
// a hole), and those bytes go back to the store with the chunk. They are
// what the file held when they were read. Another mount may have changed
// the file since (appended, written, truncated, and closed), and writing
// them back would undo that: truncated bytes would come back, appended
// ones turn to zeros. So an open file keeps, per buffered chunk, the
// ranges it wrote (spans); whenever it learns that another mount changed
// the file since it read it, it rebases: the bytes it did not write are
// read again from the store before the chunks go (rebase).
//
// It learns it, without a request of its own, when it takes a data
// generation for its first chunk write (the compare-and-set on the inode
// finds it changed), and when a chunk write is refused (another writer
// took a newer generation since); and an O_APPEND write asks the store for
// the file's size once per flush (revalidate), so that it appends at the
// end another mount's completed append or truncate left. A lock granted
// through the file brings it up to the store the same way (refresh).
//
// The size a flush writes is the larger of the stored size and the end of
// what this open file wrote since its last flush (flush): a flush never
// shrinks the file another mount grew, and grows a file another mount
// truncated only as far as this mount's own writes reach, which under
// close-to-open land at the flush, after that truncate. Bytes of those
// writes sent before the flush (past the 32 MiB buffer) that the truncate
// cut read as zeros, as on NFS.
//
// Concurrent writers of one chunk that both have unflushed writes in it
// are not merged: the one whose chunk write lands last (see dataWriter)
// wins that chunk, as docs/consistency.md says.

// span is a range of bytes within a chunk, [lo, hi).
type span struct{ lo, hi int64 }

// maxSpans bounds the spans kept per buffered chunk; past it they merge
// into one, and the bytes between count as written (an old byte may then
// go back to the store, as before spans were kept).
const maxSpans = 64

// addSpan records that [lo, hi) of chunk c was written. Caller holds
// of.mu.
func (of *openFile) addSpan(c, lo, hi int64) {
	if of.spans == nil {
		of.spans = map[int64][]span{}
	}
	s := of.spans[c]
	i, _ := slices.BinarySearchFunc(s, lo, func(x span, lo int64) int { return cmp.Compare(x.hi, lo) })
	// s[i:] are the spans that end at or after lo; merge those that
	// start at or before hi.
	j := i
	for j < len(s) && s[j].lo <= hi {
		lo, hi = min(lo, s[j].lo), max(hi, s[j].hi)
		j++
	}
	s = slices.Replace(s, i, j, span{lo, hi})
	if len(s) > maxSpans {
		s = []span{{s[0].lo, s[len(s)-1].hi}}
	}
	of.spans[c] = s
}

// ownsAll reports whether this open file wrote every byte of buffered
// chunk c that the chunk holds, in its buffer (b) or in the store now (up
// to of.attr.Size: another mount may have appended to it since it was
// read), or does not know which it wrote.
func (of *openFile) ownsAll(c int64, b []byte) bool {
	s := of.spans[c]
	cs := of.f.st.ChunkSize()
	n := max(int64(len(b)), min(of.attr.Size-c*cs, cs))
	return len(s) == 0 || (len(s) == 1 && s[0].lo == 0 && s[0].hi >= n)
}

// changedSince reports whether cur, the inode as stored now, shows
// changes of another mount to the file's data since prev, as this mount
// last knew it; allocated counts the data generations this mount took
// itself in between.
func changedSince(prev, cur store.Inode, allocated uint64) bool {
	return cur.Size != prev.Size || cur.Mtime != prev.Mtime || cur.Dgen != prev.Dgen+allocated
}

// rebase reads again what the buffered chunks hold besides this open
// file's writes, from the store as it is now (of.attr): another mount
// changed the file since they were read. What lies past the file's end
// (the stored size, or the end of this file's own writes since its last
// flush if further) reads as zeros. Cached clean chunks go too. Caller
// holds of.mu.
func (of *openFile) rebase(ctx context.Context) error {
	of.rebaseDue = false
	of.dropClean(true)
	cs := of.f.st.ChunkSize()
	end := max(of.attr.Size, of.wend)
	for c, b := range of.dirty {
		if of.ownsAll(c, b) {
			continue
		}
		var base []byte
		if c*cs < end {
			got, _, err := of.f.st.ReadChunks(ctx, of.ino, c, c)
			if err != nil {
				return err
			}
			base = got[c]
			base = base[:min(int64(len(base)), end-c*cs)]
		}
		s := of.spans[c]
		nb := make([]byte, max(int64(len(base)), s[len(s)-1].hi))
		copy(nb, base)
		for _, w := range s {
			copy(nb[w.lo:w.hi], b[w.lo:w.hi])
		}
		of.dirtyLen += int64(len(nb) - len(b))
		of.dirty[c] = nb
	}
	of.size = max(of.attr.Size, of.wend)
	return nil
}

// revalidate makes of.size the end of the file as stored now (or of this
// open file's writes, if further), for an O_APPEND write: once per flush,
// since until its flush what this file writes is its own (see the top of
// this file). The chunk the append begins in comes in the same round
// trip: the write reads it anyway, unless it has it. Caller holds of.mu.
func (of *openFile) revalidate(ctx context.Context) error {
	if of.sizeSure {
		return nil
	}
	if of.f.wb.pending(of.ino) {
		return nil // made in memory here: no other mount sees it yet
	}
	c := of.size / of.f.st.ChunkSize()
	gen := of.f.cache.Gen()
	cur, tail, tailVer, err := of.f.st.GetInodeAndChunk(ctx, of.ino, c)
	if errors.Is(err, store.ErrNotFound) {
		of.sizeSure = true // removed by another mount: appends go on in memory
		return nil
	}
	if err != nil {
		return err
	}
	of.f.cache.PutInode(cur, gen)
	if err := of.rebaseOn(ctx, cur); err != nil {
		return err
	}
	if _, dirty := of.dirty[c]; !dirty && c*of.f.st.ChunkSize() < cur.Size {
		of.remember(c, tail, tailVer)
	}
	return nil
}

// rebaseOn takes cur, the inode as stored now, for the file's base (the
// flush's compare-and-set starts from it too) and, if another mount
// changed the file since this one last knew it, rebases the buffered
// chunks on it. attr.Size is known from then until the next flush. On
// failure the base stays as it was, so that a retry rebases again.
// Caller holds of.mu.
func (of *openFile) rebaseOn(ctx context.Context, cur store.Inode) error {
	prev := of.attr
	of.attr = cur
	if changedSince(prev, cur, 0) {
		if err := of.rebase(ctx); err != nil {
			of.attr = prev
			return err
		}
	}
	of.sizeSure = true
	return nil
}

// refresh brings the open file up to the store as it is now, when a lock
// is granted through it: the lock's previous holder, on any mount, may
// have changed the file before it let the lock go, and from the grant on
// this mount must show what that holder left (lock-to-unlock, as
// docs/consistency.md says). It reads the inode again; if the file
// changed since this mount last knew it, the buffered chunks are rebased
// (the bytes this file did not write read again: its own writes stay,
// and land on top at the flush) and the size is the stored one, or the
// end of this file's own writes if further. Cached chunks go in any
// case.
//
// Every flush of the file holds of.mu across its requests, as this does:
// a flush through another descriptor has landed before this reads, or
// waits until it has, so a stored size read while it is in flight can
// never be taken for the file's.
//
// If the store cannot be read, the file is left stale: the next read,
// write, stat, seek or flush through any of its descriptors calls refresh
// first (owed), and fails while it cannot. Caller holds of.mu.
func (of *openFile) refresh(ctx context.Context) error {
	of.stale = true
	if of.f.wb.pending(of.ino) {
		// Made in memory here: no other mount has seen it.
		of.stale = false
		return nil
	}
	gen := of.f.cache.Gen()
	cur, err := of.f.st.GetInode(ctx, of.ino)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Removed by another mount: nothing newer to read. What is
		// buffered stays readable through its descriptors, as in an
		// unlinked file.
		of.stale = false
		return nil
	case err != nil:
		return err
	}
	of.f.cache.PutInode(cur, gen)
	if err := of.rebaseOn(ctx, cur); err != nil {
		return err
	}
	of.dropClean(true)
	of.stale = false
	return nil
}

// owed makes the refresh a lock grant could not make (see refresh).
// Caller holds of.mu.
func (of *openFile) owed(ctx context.Context) error {
	if !of.stale {
		return nil
	}
	return of.refresh(ctx)
}
