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

// The chunks this mount reads are kept for rereads, bounded together: those of
// open files (openFile.clean) and those of files closed since (kept).
//
// doc.go lists every copy of a file's bytes the mount keeps and what
// proves each current; this file keeps the chunks read (and written).
//
// An open file's chunks are right for as long as it is open, as before:
// every change this mount learns of drops them (the places that call
// dropClean). A closed file's chunks are kept with the data version each
// was read or written at (store.DataVersion, which every write of a chunk
// raises, on any mount, and which a deletion takes away), and the next
// open of the file here reads those versions with the inode, in the round
// trip that reads the inode anyway, and keeps the chunks that are still at
// theirs. (The inode's version alone does not do: a writer whose close
// fails after its chunks landed leaves the inode as it was, and the bytes
// changed; campaign seed 381633321.) A hole counts: a chunk read absent,
// or past the end stored, is kept at version 0, and a chunk landed there
// since fails the check (else the kernel kept its zero pages for ever).
//
// The kernel may keep the file's pages across that open
// (FOPEN_KEEP_CACHE) if every chunk it was given since it last dropped
// them is kept and unchanged, and the inode too: pages of a chunk this
// mount stopped keeping, or a change from elsewhere while the file was
// open, or written bytes dropped after a failed flush, make the kernel
// drop them at the next open (kernelStale).
//
// Not ristretto (which the metadata cache uses): its sets land
// asynchronously and its admission may refuse an entry, so a second pass
// over a file would be local or not by chance; what is kept here is
// whole files' chunks, dropped and found again by file.
type cleanCache struct {
	budget int64        // bytes, open files' and kept chunks together
	used   atomic.Int64 // bytes of chunks in every clean map
	gauge  prometheus.Gauge

	mu    sync.Mutex // a leaf: taken under openFile.mu
	kept  map[uint64]*keptFile
	order list.List // of *keptFile, least recently closed first
}

// keptFile is the clean chunks of a closed file, the data version of
// each (vers), and the inode's version when it closed (ver).
type keptFile struct {
	ino         uint64
	ver         store.Version
	chunks      map[int64][]byte
	vers        map[int64]int64
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

// minKeptCost is the least a kept chunk counts against the budget: a
// hole read (nil) or a short chunk still costs an entry, and reading
// through a sparse file of a petabyte keeps one per chunk.
const minKeptCost = 4 << 10

// keptCost is what chunk b counts against the budget.
func keptCost(b []byte) int64 { return max(int64(len(b)), minKeptCost) }

// maxKeptChunks bounds the chunks kept of one file, whatever the budget:
// the next open reads all their versions in one request.
const maxKeptChunks = 1024

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

// KeptMemory is about how much of the daemon's memory holds what the mount
// keeps on purpose, beyond its metadata cache: the file contents it keeps
// (clean.go), and the names its delegations keep with their share of
// go-fuse's nodes (deleg_shed.go, at heldNameBytes each). The daemon's soft
// memory limit follows it (cmd/mount.go), so that the collector neither
// lets garbage grow into room nothing uses nor runs without end over a
// heap this keeps.
func (f *Mount) KeptMemory() int64 {
	kept := f.clean.used.Load()
	if f.delegs != nil {
		kept += f.delegs.held.Load() * heldNameBytes
	}
	return kept
}

// keep takes the chunks of a file closed with its inode at version ver
// (the caller has emptied its openFile's maps). Chunks of an unknown
// version (a file made in memory, not stored yet) are not kept.
func (cc *cleanCache) keep(k *keptFile) {
	if !k.ver.Known() {
		cc.add(-k.bytes)
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.dropLocked(k.ino)
	k.at = cc.order.PushBack(k)
	cc.kept[k.ino] = k
	cc.shrinkLocked()
}

// take returns the kept chunks of ino and forgets them (nil: none).
func (cc *cleanCache) take(ino uint64) *keptFile {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	k := cc.kept[ino]
	if k == nil {
		return nil
	}
	cc.order.Remove(k.at)
	delete(cc.kept, ino)
	return k
}

// keptChunks lists the chunks kept of ino (nil, false: none kept).
func (cc *cleanCache) keptChunks(ino uint64) ([]int64, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	k := cc.kept[ino]
	if k == nil {
		return nil, false
	}
	return append([]int64{}, k.lru...), true
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

// remember keeps chunk c, just read at data version ver (below 0:
// unknown, which is not kept past the file's last close), for rereads
// within the budget. Caller holds of.mu.
func (of *openFile) remember(c int64, b []byte, ver int64) {
	cc := of.f.clean
	if old, ok := of.clean[c]; ok {
		of.cleanBytes -= keptCost(old)
		cc.add(-keptCost(old))
	} else {
		of.cleanLRU = append(of.cleanLRU, c)
	}
	of.clean[c] = b
	if of.cleanVer == nil {
		of.cleanVer = map[int64]int64{}
	}
	of.cleanVer[c] = ver
	of.cleanBytes += keptCost(b)
	cc.add(keptCost(b))
	for !cc.shrink() && len(of.cleanLRU) > cleanFloor || len(of.cleanLRU) > maxKeptChunks {
		// Over budget with every closed file gone: this file's oldest.
		// Other open files keep theirs (their locks are not taken here).
		of.evictClean(of.cleanLRU[0])
	}
}

// rememberWritten keeps chunk c, just written at data version ver, for
// reads that follow in this open, up to cleanFloor chunks of the file: a
// writer's stream need not fill the budget. Caller holds of.mu.
func (of *openFile) rememberWritten(c int64, b []byte, ver int64) {
	of.forgetClean(c)
	for len(of.cleanLRU) >= cleanFloor {
		of.evictClean(of.cleanLRU[0])
	}
	of.remember(c, b, ver)
}

// evictClean drops chunk c to keep a bound: the kernel may still have its
// pages, which can no longer be checked at the next open.
func (of *openFile) evictClean(c int64) {
	of.forgetClean(c)
	of.kernelStale = true
}

// forgetClean drops chunk c from what this file keeps. Caller holds of.mu.
func (of *openFile) forgetClean(c int64) {
	b, ok := of.clean[c]
	if !ok {
		return
	}
	delete(of.clean, c)
	delete(of.cleanVer, c)
	for i, k := range of.cleanLRU {
		if k == c {
			of.cleanLRU = append(of.cleanLRU[:i], of.cleanLRU[i+1:]...)
			break
		}
	}
	of.cleanBytes -= keptCost(b)
	of.f.clean.add(-keptCost(b))
}

// dropClean forgets every chunk this file keeps, and the read-ahead in
// flight, because the file's bytes changed. outside says the change came
// from elsewhere (another mount, or bytes the kernel holds were dropped):
// the kernel's pages of the file may be wrong too, and its next open must
// not keep them. Caller holds of.mu.
func (of *openFile) dropClean(outside bool) {
	of.f.clean.add(-of.cleanBytes)
	of.clean, of.cleanVer, of.cleanLRU, of.cleanBytes = map[int64][]byte{}, nil, nil, 0
	of.cgen++
	of.kernelStale = of.kernelStale || outside
}

// adoptKept makes the chunks kept of the file this openFile's again, those
// still at the data versions vers says (read with a, the inode, at this
// open), and reports whether the kernel's pages of it may be kept: every
// chunk unchanged, and the inode. The openFile has none of its own yet.
// Caller holds of.mu.
func (of *openFile) adoptKept(a store.Inode, vers map[int64]int64) (kernelKeeps bool) {
	k := of.f.clean.take(of.ino)
	if k == nil {
		return false
	}
	same := a.Ver.Known() && a.Ver == k.ver && !k.kernelStale
	for c, b := range k.chunks {
		if v, asked := vers[c]; !asked || v != k.vers[c] {
			delete(k.chunks, c)
			delete(k.vers, c)
			k.bytes -= keptCost(b)
			of.f.clean.add(-keptCost(b))
			same = false
		}
	}
	lru := k.lru[:0]
	for _, c := range k.lru {
		if _, ok := k.chunks[c]; ok {
			lru = append(lru, c)
		}
	}
	of.clean, of.cleanVer, of.cleanLRU, of.cleanBytes = k.chunks, k.vers, lru, k.bytes
	return same
}

// keepClosed hands this file's chunks to the mount's kept ones at its last
// close, those whose data version is known. Caller holds of.mu.
func (of *openFile) keepClosed() {
	k := &keptFile{ino: of.ino, ver: of.attr.Ver, chunks: of.clean, vers: map[int64]int64{}, bytes: of.cleanBytes, kernelStale: of.kernelStale}
	if of.unlinked || of.changed || len(of.dirty) > 0 || of.f.wb.pending(of.ino) {
		k.ver = store.Version{} // not what the stored inode says: not kept
	}
	for _, c := range of.cleanLRU {
		if v, ok := of.cleanVer[c]; ok && v >= 0 {
			k.vers[c] = v
			k.lru = append(k.lru, c)
			continue
		}
		b := k.chunks[c]
		delete(k.chunks, c)
		k.bytes -= keptCost(b)
		of.f.clean.add(-keptCost(b))
		k.kernelStale = true // its pages came from a chunk not checkable
	}
	of.f.clean.keep(k)
	of.clean, of.cleanVer, of.cleanLRU, of.cleanBytes = map[int64][]byte{}, nil, nil, 0
	// Read-ahead still on its way is not for this openFile any more: kept
	// in it, its bytes would count against the budget for ever.
	of.cgen++
}

// firstChunkWanted says whether an open for reading should bring the
// file's first chunk with its inode: not if this mount has the file open
// or kept already (the kept chunks' versions come instead), nor if the
// file is made in memory here.
func (f *Mount) firstChunkWanted(ino uint64) bool {
	return !f.wb.pending(ino) && f.openState(ino) == nil && !f.clean.has(ino)
}

// inodeAndFirstChunk is freshInode for an open that will likely read: the
// first chunk (a small file's whole contents) comes in the same round
// trip, one request an open less for grep -r, cat or a compiler reading
// its sources. withFirst false: the chunk could not be read (it does not
// decode), which fails its read, not the open.
func (f *Mount) inodeAndFirstChunk(ctx context.Context, ino uint64) (a store.Inode, first []byte, ver int64, withFirst bool, err error) {
	gen := f.cache.Gen()
	a, first, ver, err = f.st.GetInodeAndChunk(ctx, ino, 0)
	switch {
	case err == nil:
		f.cache.PutInode(a, gen)
		return a, first, ver, true, nil
	case errors.Is(err, store.ErrNotFound):
		return a, nil, 0, false, err
	}
	a, err = f.freshInode(ctx, ino)
	return a, nil, 0, false, err
}

// inodeAndKeptVersions is freshInode for a file whose chunks this mount
// keeps (and has not open): the versions of those chunks come in the same
// round trip. ok false: nothing kept (any more), or the file is made in
// memory here; the caller reads the inode alone.
func (f *Mount) inodeAndKeptVersions(ctx context.Context, ino uint64) (a store.Inode, vers map[int64]int64, ok bool, err error) {
	if f.wb.pending(ino) || f.openState(ino) != nil {
		return a, nil, false, nil
	}
	chunks, kept := f.clean.keptChunks(ino)
	if !kept {
		return a, nil, false, nil
	}
	gen := f.cache.Gen()
	a, vers, err = f.st.InodeAndChunkVersions(ctx, ino, chunks)
	if err != nil {
		return a, nil, false, err
	}
	f.cache.PutInode(a, gen)
	return a, vers, true, nil
}

// takeFirst keeps chunk 0 as an open read it with a (nil: not stored, a
// hole), if it read it and the file has nothing of its own there. Caller
// holds of.mu, and has taken a for the open file's.
func (of *openFile) takeFirst(a store.Inode, rd openRead) {
	if !rd.withFirst || a.Type != store.TypeFile || a.Size <= 0 {
		return
	}
	if _, ok := of.clean[0]; ok || of.changed || len(of.dirty) > 0 {
		return
	}
	of.remember(0, rd.first, rd.firstVer)
}
