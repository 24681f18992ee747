package vfs

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/esfs/esfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// The chunks this mount read keep for rereads, bounded together: those of
// open files (openFile.clean) and those of files closed since (kept).
//
// An open file's chunks are right for as long as it is open, as before:
// every change this mount learns of drops them (the places that call
// dropClean). A closed file's chunks are kept with the version of its
// inode document they were right for, and an open finds them again only
// if the inode it reads afresh (close-to-open) is still at that version.
// Every change of a file's bytes that is done, on any mount, writes its
// inode (size, mtime, data generation), so an unchanged version is an
// unchanged file. What it does not cover: chunks a writer sends before
// its close (past its dirty limit), which the file's readers see or not
// until that close writes the inode, as close-to-open allows; and the
// chunks of a writer that dies before its close, which a reader with the
// file's chunks kept does not see until the inode next changes.
//
// The same test tells whether the kernel may keep the file's pages
// (FOPEN_KEEP_CACHE): they are what this mount served or was written
// through it, unless a change came from elsewhere while the file was
// open (kernelStale), or written bytes were dropped after a failed flush.
//
// Not ristretto (which the metadata cache uses): its sets land
// asynchronously and its admission may refuse an entry, so a second pass
// over a file would be local or not by chance; what is kept here is
// whole files' chunks, dropped and found again by file and version.
type cleanCache struct {
	budget int64        // bytes, open files' and kept chunks together
	used   atomic.Int64 // bytes of chunks in every clean map
	gauge  prometheus.Gauge

	mu    sync.Mutex // a leaf: taken under openFile.mu
	kept  map[uint64]*keptFile
	order list.List // of *keptFile, least recently closed first
}

// keptFile is the clean chunks of a closed file.
type keptFile struct {
	ino         uint64
	ver         store.Version
	chunks      map[int64][]byte
	lru         []int64
	bytes       int64
	kernelStale bool
	at          *list.Element
}

// cleanFloor is how many chunks an open file keeps whatever the budget:
// what a sequential reader has fetched ahead must stay until it is read.
const cleanFloor = readAhead + 2

// DefaultDataCache is the default budget of the chunks a mount keeps.
const DefaultDataCache = 128 << 20

// maxKept bounds the closed files kept, whose chunks may be few or none:
// a file written here is kept for its version alone, so that the kernel
// keeps the pages the writes left it.
const maxKept = 4096

func newCleanCache(budget int64, gauge prometheus.Gauge) *cleanCache {
	return &cleanCache{budget: max(budget, 0), kept: map[uint64]*keptFile{}, gauge: gauge}
}

// add counts n more bytes kept (less, if negative).
func (cc *cleanCache) add(n int64) {
	cc.used.Add(n)
	cc.gauge.Add(float64(n))
}

// CachedData is how many bytes of file contents the mount keeps now
// (--data-cache-size bounds it, but for what open files read ahead): the
// daemon's soft memory limit follows it.
func (f *Mount) CachedData() int64 { return f.clean.used.Load() }

// keep takes the chunks of a file closed at version ver (the caller has
// emptied its openFile's map). Chunks of an unknown version (a file made
// in memory, not stored yet) are not kept.
func (cc *cleanCache) keep(ino uint64, ver store.Version, chunks map[int64][]byte, lru []int64, bytes int64, kernelStale bool) {
	if !ver.Known() {
		cc.add(-bytes)
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.dropLocked(ino)
	k := &keptFile{ino: ino, ver: ver, chunks: chunks, lru: lru, bytes: bytes, kernelStale: kernelStale}
	k.at = cc.order.PushBack(k)
	cc.kept[ino] = k
	cc.shrinkLocked()
}

// take returns the kept chunks of ino if they are those of version ver,
// and forgets them either way (nil: none, or older).
func (cc *cleanCache) take(ino uint64, ver store.Version) *keptFile {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	k := cc.kept[ino]
	if k == nil {
		return nil
	}
	cc.order.Remove(k.at)
	delete(cc.kept, ino)
	if !ver.Known() || k.ver != ver {
		cc.add(-k.bytes)
		return nil
	}
	return k
}

// has reports whether chunks of ino are kept (of some version).
func (cc *cleanCache) has(ino uint64) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.kept[ino] != nil
}

// drop forgets the kept chunks of ino (its inode is gone).
func (cc *cleanCache) drop(ino uint64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.dropLocked(ino)
}

func (cc *cleanCache) dropLocked(ino uint64) {
	if k := cc.kept[ino]; k != nil {
		cc.order.Remove(k.at)
		delete(cc.kept, ino)
		cc.add(-k.bytes)
	}
}

// shrink forgets closed files' chunks, the least recently closed first,
// until the budget is kept or none are left; it reports whether the
// budget is kept.
func (cc *cleanCache) shrink() bool {
	if cc.used.Load() <= cc.budget {
		return true
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.shrinkLocked()
}

func (cc *cleanCache) shrinkLocked() bool {
	for cc.used.Load() > cc.budget || len(cc.kept) > maxKept {
		e := cc.order.Front()
		if e == nil {
			return false
		}
		cc.dropLocked(e.Value.(*keptFile).ino)
	}
	return true
}

// remember keeps chunk c, just read, for rereads within the budget.
// Caller holds of.mu.
func (of *openFile) remember(c int64, b []byte) {
	cc := of.f.clean
	if old, ok := of.clean[c]; ok {
		of.cleanBytes -= int64(len(old))
		cc.add(-int64(len(old)))
	} else {
		of.cleanLRU = append(of.cleanLRU, c)
	}
	of.clean[c] = b
	of.cleanBytes += int64(len(b))
	cc.add(int64(len(b)))
	for !cc.shrink() && len(of.cleanLRU) > cleanFloor {
		// Over budget with every closed file gone: this file's oldest.
		// Other open files keep theirs (their locks are not taken here).
		of.forgetClean(of.cleanLRU[0])
	}
}

// rememberWritten keeps chunk c, just written, for reads that follow in
// this open, up to cleanFloor chunks of the file: the kernel has the pages
// the writes went through, and keeps them at the next open if nothing
// changes meanwhile, so a writer's stream need not fill the budget.
// Caller holds of.mu.
func (of *openFile) rememberWritten(c int64, b []byte) {
	of.forgetClean(c)
	for len(of.cleanLRU) >= cleanFloor {
		of.forgetClean(of.cleanLRU[0])
	}
	of.remember(c, b)
}

// forgetClean drops chunk c from what this file keeps. Caller holds of.mu.
func (of *openFile) forgetClean(c int64) {
	b, ok := of.clean[c]
	if !ok {
		return
	}
	delete(of.clean, c)
	for i, k := range of.cleanLRU {
		if k == c {
			of.cleanLRU = append(of.cleanLRU[:i], of.cleanLRU[i+1:]...)
			break
		}
	}
	of.cleanBytes -= int64(len(b))
	of.f.clean.add(-int64(len(b)))
}

// dropClean forgets every chunk this file keeps, and the read-ahead in
// flight, because the file's bytes changed. outside says the change came
// from elsewhere (another mount, or bytes the kernel holds were dropped):
// the kernel's pages of the file may be wrong too, and its next open must
// not keep them. Caller holds of.mu.
func (of *openFile) dropClean(outside bool) {
	of.f.clean.add(-of.cleanBytes)
	of.clean, of.cleanLRU, of.cleanBytes = map[int64][]byte{}, nil, 0
	of.cgen++
	of.kernelStale = of.kernelStale || outside
}

// adoptKept makes the chunks kept of the file, closed at version ver,
// this openFile's again, and reports whether the kernel's pages of it may
// be kept; the openFile has none of its own yet. Caller holds of.mu.
func (of *openFile) adoptKept(ver store.Version) (kernelKeeps bool) {
	k := of.f.clean.take(of.ino, ver)
	if k == nil {
		return false
	}
	of.clean, of.cleanLRU, of.cleanBytes = k.chunks, k.lru, k.bytes
	return !k.kernelStale
}

// keepClosed hands this file's chunks to the mount's kept ones at its last
// close. Caller holds of.mu.
func (of *openFile) keepClosed() {
	ver := of.attr.Ver
	if of.unlinked || of.changed || len(of.dirty) > 0 || of.f.wb.pending(of.ino) {
		ver = store.Version{} // not what the stored inode says: not kept
	}
	of.f.clean.keep(of.ino, ver, of.clean, of.cleanLRU, of.cleanBytes, of.kernelStale)
	of.clean, of.cleanLRU, of.cleanBytes = map[int64][]byte{}, nil, 0
	// Read-ahead still on its way is not for this openFile any more: kept
	// in it, its bytes would count against the budget for ever.
	of.cgen++
}

// firstChunkWanted says whether an open for reading should bring the
// file's first chunk with its inode: not if this mount has the file open
// or kept already (its chunks are likely still right), nor if the file is
// made in memory here.
func (f *Mount) firstChunkWanted(ino uint64) bool {
	return !f.wb.pending(ino) && f.openState(ino) == nil && !f.clean.has(ino)
}

// inodeAndFirstChunk is freshInode for an open that will likely read: the
// first chunk (a small file's whole contents) comes in the same round
// trip, one request an open less for grep -r, cat or a compiler reading
// its sources. withFirst false: the chunk could not be read (it does not
// decode), which fails its read, not the open.
func (f *Mount) inodeAndFirstChunk(ctx context.Context, ino uint64) (a store.Inode, first []byte, withFirst bool, err error) {
	gen := f.cache.Gen()
	a, first, err = f.st.GetInodeAndChunk(ctx, ino, 0)
	switch {
	case err == nil:
		f.cache.PutInode(a, gen)
		return a, first, true, nil
	case errors.Is(err, store.ErrNotFound):
		return a, nil, false, err
	}
	a, err = f.freshInode(ctx, ino)
	return a, nil, false, err
}

// rememberFirst keeps chunk 0 (nil: not stored, a hole), read with the
// inode at version ver, if the open file is at that version and has
// nothing of its own there. Caller does not hold of.mu.
func (of *openFile) rememberFirst(ver store.Version, b []byte) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if _, ok := of.clean[0]; ok || of.changed || len(of.dirty) > 0 || of.attr.Ver != ver {
		return
	}
	of.remember(0, b)
}
