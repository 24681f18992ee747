package vfs

import (
	"context"
	"fmt"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// openFile is the state of an inode that has open handles in this mount.
// Written data is buffered here per chunk and sent to the store on flush,
// fsync, close, or when the buffer exceeds the dirty limit.
type openFile struct {
	f   *Mount
	ino uint64

	mu lockorder.Mutex // protects the following; held across store I/O of this file
	// INVARIANT: refs > 0 while the openFile is in FS.open.
	refs     int
	attr     store.Inode // as last read or written
	size     int64       // current size, including buffered writes
	dirty    map[int64][]byte
	dirtyLen int64
	// changed: size or mtime differ from the stored inode.
	changed bool
	mtime   int64
	// wend is the end of what this file wrote since its last flush or
	// truncate (0: nothing), spans the ranges it wrote of each dirty
	// chunk, and sizeSure says that attr.Size was read since its last
	// flush, for O_APPEND (see rebase.go).
	wend     int64
	spans    map[int64][]span
	sizeSure bool
	// cutOwed: a truncate cut the store's bytes past cutSize and could not
	// write that size; the next flush does, before this file's writes
	// since, which may have grown it again (wend).
	cutOwed bool
	cutSize int64
	// writeSess is the session under which the buffered writes and
	// changes were made (see staleWrites); "" when there are none.
	writeSess string
	// stale: a lock was granted through the file and it could not be
	// brought up to the store then; its next use does it (owed).
	stale bool
	// rebaseDue: the stored inode was learnt changed by another mount
	// (noteInode) while chunks were buffered; the next chunk write
	// rebases them first (rebase.go).
	rebaseDue bool
	// clean holds the chunks read of the file, least recently read first
	// in cleanLRU, bounded with every other file's by the mount's
	// cleanCache (clean.go). kernelStale: a change from elsewhere came while
	// the file was open since the kernel last dropped its pages (clean.go).
	clean       map[int64][]byte
	cleanVer    map[int64]int64 // each clean chunk's data version, -1 unknown
	cleanLRU    []int64
	cleanBytes  int64
	kernelStale bool
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
	// sent are the chunks sent (landed, or outcome unknown) since the
	// size was last written: those past the stored size are what a
	// failed flush takes back (undoPastEnd).
	sent map[int64]bool
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

// readAhead is how many chunks past the one asked for a sequential reader
// gets fetched in the background, so that the store works while the
// kernel consumes.
const (
	readAhead = 8
	aheadPer  = 2 // chunks per read-ahead request
)

// FlushAll makes the buffered writes of every open file durable, and the
// pending batch after them (at unmount: trying again until ctx ends).
// Unlike fsync it reports to no description: what it says is for the
// log, and a batch lost before it is reported there too.
func (f *Mount) FlushAll(ctx context.Context) error {
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
	// The files' sizes may have gone to the pending batch: it lands last.
	if err := f.settleAll(ctx); err != nil && first == nil {
		first = fmt.Errorf("flushing the pending batch: %w", err)
	}
	if err := f.errs.unseen(); err != nil && first == nil {
		first = err
	}
	return first
}

// openState returns the open state of ino in this mount, or nil.
func (f *Mount) openState(ino uint64) *openFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open[ino]
}

// current returns the stored inode a as this mount sees it: the size and
// times of writes not yet flushed, and the chunks they add to what it
// stores (an upper bound; -1 unknown).
func (of *openFile) current(a store.Inode) store.Inode {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.changed {
		// The times too: a kernel that stats between a write and the close
		// keeps what it is told (for as long as a delegation holds it), and
		// the close's flush tells it nothing.
		a.Size = of.size
		a.Mtime = max(a.Mtime, of.mtime)
		a.Ctime = max(a.Ctime, of.mtime)
	}
	if a.Chunks >= 0 {
		a.Chunks += of.newChunks + int64(len(of.dirty))
	}
	return a
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
func (f *Mount) noteInode(a store.Inode) {
	of := f.openState(a.Ino)
	if of == nil {
		return
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if newer(a.Ver, of.attr.Ver) {
		if changedSince(of.attr, a, 0) {
			// Another mount changed the file since this one last knew it
			// (or this call set its mtime): the flush, which finds the
			// inode as it is now, can no longer tell, so the chunks read
			// before are dropped, and those with buffered writes rebased
			// at the flush. Else the flush wrote back the bytes it had
			// read around its writes, undoing another mount's append
			// (zeros) or write (campaign seed 140690161: an fsetxattr
			// between the other mount's append and this one's flush).
			of.dropClean(true)
			of.rebaseDue = of.rebaseDue || len(of.dirty) > 0
			if !of.cutOwed {
				// As rebase leaves it: a write reading a chunk cuts it
				// there.
				of.size = max(a.Size, of.wend)
			}
		}
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
