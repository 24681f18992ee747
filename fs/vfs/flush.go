package vfs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

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
func (w *dataWriter) stamp(ctx context.Context, f *Mount, a *store.Inode) (store.Stamp, error) {
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
// error: the error is reported now, and to every open file description
// of the file at its next fsync or close (errseq.go), later reads see
// what the store holds, and the request, should it land late, cannot
// overwrite anything written after it.
//
// A file made in memory (pending) has nothing stored outside its batch:
// its chunks go with the batch, or, past what a batch holds, the batch
// lands first (see writeback.go: a rollback deletes the chunks of the
// inodes it staged, which must be only its own). Caller holds of.mu.
func (of *openFile) writeChunks(ctx context.Context) error {
	if of.f.wb.hold(ctx, of) {
		of.spans = nil
		return nil // a pending file's chunks go with its batch
	}
	if err := of.staleWrites(); err != nil {
		return err
	}
	if err := of.landFirst(ctx); err != nil {
		return of.giveUp(ctx, err)
	}
	cs := of.f.st.ChunkSize()
	for attempt := 0; len(of.dirty) > 0; attempt++ {
		prev, gen := of.attr, of.w.gen
		st, err := of.w.stamp(ctx, of.f, &of.attr)
		if errors.Is(err, store.ErrNotFound) {
			if err := of.f.errs.gone(of.ino); err != nil {
				of.dropDirty()
				return err
			}
			// Removed by another mount: nobody can read these bytes
			// (Linux's writes to an unlinked file succeed too).
			of.dropDirty()
			return nil
		}
		if err != nil {
			return of.giveUp(ctx, err) // nothing was sent
		}
		// Another mount changed the file since this one read what the
		// chunks hold besides its writes (see rebase.go).
		if of.rebaseDue || of.w.gen != gen && (attempt > 0 || changedSince(prev, of.attr, 1)) {
			if err := of.rebase(ctx); err != nil {
				return of.giveUp(ctx, err) // nothing was sent
			}
		}
		if err := of.sendable(); err != nil {
			return of.giveUp(ctx, err)
		}
		if err := of.cutBeforeGrowth(ctx); err != nil {
			return of.giveUp(ctx, err) // none of the chunks was sent
		}
		if of.sent == nil {
			of.sent = map[int64]bool{}
		}
		for c := range of.dirty {
			of.sent[c] = true
		}
		written, err := of.f.st.WriteChunks(ctx, of.ino, of.dirty, st)
		if err != nil {
			of.undoPastEnd(ctx)
			of.forget(err)
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
				of.rememberWritten(c, b, st.Version)
				delete(of.spans, c)
			}
		}
		of.dirty, of.dirtyLen = again, 0
		for _, b := range again {
			of.dirtyLen += int64(len(b))
		}
		if len(again) > 0 {
			if attempt+1 >= conflictRetries {
				err := fmt.Errorf("chunks of inode %d: newer writes kept winning: %w", of.ino, store.ErrConflict)
				of.forget(err)
				return err
			}
			of.w.gen = 0 // take a newer generation
		}
	}
	return nil
}

// cutBeforeGrowth: a flush that grows the file from a chunk past the one
// its stored end falls in first cuts that chunk at the end (FS.cutTail),
// as a truncate up does: the bytes of a write that was lost may lie there
// past the end (a flush whose answer was lost, whose undo was refused
// too), and the growth would expose them, bytes their writer was told
// were lost. One chunk read, only for such a growth. Caller holds of.mu.
func (of *openFile) cutBeforeGrowth(ctx context.Context) error {
	cs := of.f.st.ChunkSize()
	end := of.attr.Size
	if end%cs == 0 || of.dirty[end/cs] != nil {
		return nil // a chunk written whole, or the one this flush writes
	}
	for c, b := range of.dirty {
		if c*cs+int64(len(b)) > end {
			_, err := of.f.cutTail(ctx, of.ino, end, &of.w, &of.attr)
			return err // refused: a newer write of the chunk, which cut it
		}
	}
	return nil
}

// landFirst lands the batch of a pending file whose dirty chunks it could
// not hold (hold said no: past maxHeldData, or its batch's outcome is not
// known yet), so that they are written as a stored file's: a file made in
// memory has nothing stored outside its batch, whose rollback deletes the
// chunks of the inodes it staged (writeback.go). A file made in a batch
// that was lost exists nowhere: nothing is written for it. Caller holds
// of.mu.
func (of *openFile) landFirst(ctx context.Context) error {
	if len(of.dirty) == 0 {
		return nil
	}
	if err := of.f.errs.gone(of.ino); err != nil {
		of.dropDirty()
		return err
	}
	a, pending := of.f.wb.inode(of.ino)
	if !pending {
		return nil
	}
	if err := of.f.settle(ctx); err != nil {
		return err // nothing was sent (writeChunks gives them up)
	}
	if err := of.f.errs.gone(of.ino); err != nil {
		of.dropDirty()
		return err
	}
	if of.w.gen != a.Dgen {
		// The generation it was created with was moved on by a rollback
		// (see rolledBack): take one above it.
		of.w.gen = 0
	}
	return nil
}

// staleWrites drops what the file buffered under a session of this mount
// that was declared dead before it was sent (the mount was frozen, or cut
// off, past its lease, and then woke): what survives a dead mount is what
// it sent before its death, never more (docs/consistency.md), so sending
// it under the new session would land writes after the death that other
// mounts have already judged lost. Every open file description of the
// file is told EIO, once, at its next fsync or close (errseq.go), and the
// call that finds them, a write included, fails with EIO too. Caller
// holds of.mu.
func (of *openFile) staleWrites() error {
	if len(of.dirty) == 0 && !of.changed {
		of.writeSess = ""
		return nil
	}
	if !of.deadWrites() {
		return nil
	}
	err := fmt.Errorf("inode %d: writes buffered under session %s, declared dead before they were sent, are lost: %w", of.ino, of.writeSess, locking.ErrLeaseLost)
	of.forget(err)
	return err
}

// forget gives up what the file has buffered, and the size and times its
// writes were to set, after a flush that lost them (err): every open file
// description of the file is told, once, at its next fsync or close
// (errseq.go), and from now on the file is what is stored, as Linux marks
// pages clean after a failed write-back. Kept, the size would go on
// showing through fstat whatever other mounts did to the file, and the
// next flush would write it, the bytes it covers zeros, after the process
// was told they were lost. Chunks it created stay counted (newChunks):
// they are stored. Caller holds of.mu.
func (of *openFile) forget(err error) {
	of.dropDirty()
	of.kernelStale = true // its pages hold the bytes dropped
	of.changed, of.wend, of.cutOwed, of.killPriv = false, 0, false, false
	of.size, of.extent = of.attr.Size, min(of.extent, of.attr.Size)
	of.writeSess, of.sent = "", nil
	of.f.errs.fail(of.ino, err)
	of.sticky = err
}

// sendable says whether the buffered chunks may be sent now, right before
// they are: not if the session they were buffered under was declared dead
// meanwhile (a flush that began on a woken mount before it learned of its
// death, or whose stamp waited for a new session: campaign seed
// 78857218, whose chunk landed under the new session after the close was
// told EIO): they are lost (staleWrites); nor while its lease has run out
// (frozen, cut off: others may declare it dead before the request lands),
// when they are given up as well (giveUp). Caller holds of.mu.
func (of *openFile) sendable() error {
	if of.deadWrites() {
		return of.staleWrites()
	}
	return of.f.co.Session().Check()
}

// giveUp is forget for a flush that failed before it sent anything (the
// cluster did not answer, the lease ran out): what the file buffered is
// given up all the same, as Linux marks pages clean after any failed
// write-back, so that the EIO the call returns means what it says: kept,
// the bytes would land at a later flush, after the process (and anyone
// looking meanwhile) was told they were lost (campaign seed 205007824: an
// fsync failed reading a lock document, and the close after it landed the
// write). A flush interrupted by its caller (a signal) keeps them: nothing
// went wrong with them. Caller holds of.mu.
func (of *openFile) giveUp(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	if len(of.dirty) > 0 || of.changed {
		of.undoPastEnd(ctx) // what earlier rounds sent past the end
		of.forget(err)
	}
	return err
}

// deadWrites: what the file buffered was written under a session of this
// mount that has been declared dead since. Caller holds of.mu.
func (of *openFile) deadWrites() bool {
	if of.writeSess == "" {
		return false
	}
	cur := of.f.co.Session()
	return of.writeSess != cur.ID() || cur.Declared()
}

// dirtied records the session under which a write or change is buffered.
// Caller holds of.mu.
func (of *openFile) dirtied() {
	if of.writeSess == "" {
		of.writeSess = of.f.co.Session().ID()
	}
}

// dropDirty forgets the buffered chunks (see writeChunks); reads then go
// to the store. Caller holds of.mu.
func (of *openFile) dropDirty() {
	for c := range of.dirty {
		of.forgetClean(c)
	}
	of.dirty, of.dirtyLen, of.spans = map[int64][]byte{}, 0, nil
	of.cgen++
}

// flush makes everything written through this mount durable: chunks first,
// then the inode (size, mtime) with compare-and-set. The size grows to the
// end of what this file wrote since its last flush, and never shrinks:
// another mount may have grown or truncated the file meanwhile (see
// rebase.go). Caller holds of.mu.
func (of *openFile) flush(ctx context.Context) error {
	if err := of.owed(ctx); err != nil {
		err = of.giveUp(ctx, err) // nothing was sent
		of.sticky = nil           // reported now
		return err
	}
	of.sizeSure = false // another mount may change the file from now on
	if !of.f.wb.pending(of.ino) {
		_ = of.staleWrites() // reported through sticky, just below
	}
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
	// Again before the size: the session the writes were made under may
	// have been declared dead while the chunks were sent, and the size's
	// change lock would be taken under the new one (campaign seed
	// 589770822: a close on a woken mount landed writes made before its
	// death, and returned 0).
	if of.deadWrites() {
		of.undoPastEnd(ctx) // sent after the death: taken back too
		err := of.staleWrites()
		of.sticky = nil // reported now
		return err
	}
	wend, mtime, created, killPriv := of.wend, of.mtime, of.newChunks, of.killPriv
	cutOwed, cutSize := of.cutOwed, of.cutSize
	a, err := of.f.updateInodeFrom(ctx, of.ino, &of.attr, func(a *store.Inode) error {
		if cutOwed && a.Size > cutSize {
			a.Size = cutSize
			a.Chunks = -1 // the cut's deletions were never counted
		}
		a.Size = max(a.Size, wend)
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
		if err := of.f.errs.gone(of.ino); err != nil {
			return err // made in a batch that was lost: it is nowhere
		}
		return nil // removed by another mount meanwhile: nothing to size
	}
	if err != nil {
		// The size and times may or may not have landed: either way
		// they are not this file's to write again later (forget), and
		// the chunks sent past the end are taken back.
		of.undoPastEnd(ctx)
		of.forget(err)
		of.sticky = nil // reported now
		return err
	}
	if a.Size != of.size {
		// Another mount's change: what was read of the file is older.
		of.dropClean(true)
	}
	of.attr, of.size, of.wend = a, a.Size, 0
	of.changed, of.killPriv, of.cutOwed = false, false, false
	of.newChunks, of.sent = 0, nil
	return nil
}

// undoPastEnd takes back the chunks this file sent past the stored end
// since its size was last written, after a flush failed before its size
// landed (or with its outcome unknown): such a chunk stays past the end of
// file, where nobody reads it, until a growth of the file (a truncate up,
// another write past the end, on any mount) exposes its bytes, which the
// writer was told were lost (campaign seed 625586132). Each is deleted,
// and the one the end falls in written again without what lies past it,
// under this file's own generation at a higher count: a write by another
// mount under a newer generation refuses the undo, one under an older
// generation was refused by the chunk being undone, so only this file's
// own bytes go; and only what lies past the end as stored now, read
// first. Without a generation to count on (none yet, or spent) it does
// nothing: a new one would outrank others' writes. Best effort, within
// one request timeout: a cluster that refuses this too leaves the chunks
// (logged). Caller holds of.mu.
func (of *openFile) undoPastEnd(ctx context.Context) {
	sent := of.sent
	of.sent = nil
	cs := of.f.st.ChunkSize()
	// pastEnd returns the sent chunk the end falls in (-1: none) and
	// those wholly past it.
	pastEnd := func(end int64) (straddle int64, past []int64) {
		straddle = -1
		for c := range sent {
			switch {
			case c*cs >= end:
				past = append(past, c)
			case (c+1)*cs > end && end%cs != 0:
				straddle = c
			}
		}
		return straddle, past
	}
	// Nothing past the end this file knows: no request.
	if straddle, past := pastEnd(max(of.attr.Size, 0)); straddle < 0 && len(past) == 0 {
		return
	}
	if of.w.gen == 0 || of.w.counter+2 >= 1<<store.DataCounterBits {
		of.f.log.Warn("chunks sent past the end of a file whose flush failed are left there (no data generation to undo them under)", "ino", of.ino)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), of.f.st.Timeout())
	defer cancel()
	fail := func(err error) {
		of.f.log.Warn("could not take back the chunks a failed flush sent past the end of file", "ino", of.ino, "err", err)
	}
	// The end as stored now: the size write may have landed after all
	// (nothing of it is then past the end), or another mount may have
	// grown the file over these chunks (its bytes may be in them).
	stored, err := of.f.st.GetInode(ctx, of.ino)
	if err != nil {
		fail(err)
		return
	}
	end := max(stored.Size, of.attr.Size, 0)
	straddle, past := pastEnd(end)
	if len(past) == 0 && straddle < 0 {
		return
	}
	if straddle >= 0 {
		got, _, err := of.f.st.ReadChunks(ctx, of.ino, straddle, straddle)
		if err != nil {
			fail(err)
			return
		}
		if b, ok := got[straddle]; ok {
			// Written again even when the sent chunk is not there (yet):
			// at a higher count, it fences that write off should it still
			// be on its way (held past its deadline: campaign seed
			// 221705407, where it landed after this look and a growth
			// exposed it).
			st, _ := of.w.stamp(ctx, of.f, &of.attr) // has a generation: no request
			if _, err := of.f.st.WriteChunks(ctx, of.ino, map[int64][]byte{straddle: b[:min(int64(len(b)), end-straddle*cs)]}, st); err != nil {
				fail(err)
				return
			}
		}
	}
	slices.Sort(past)
	for i := 0; i < len(past); {
		j := i
		for j+1 < len(past) && past[j+1] == past[j]+1 {
			j++
		}
		st, _ := of.w.stamp(ctx, of.f, &of.attr)
		if _, err := of.f.st.TryDeleteChunks(ctx, of.ino, past[i], past[j], st.Version); err != nil {
			fail(err)
			return
		}
		i = j + 1
	}
}
