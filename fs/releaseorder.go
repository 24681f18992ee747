package fs

// Lock requests and opens after the RELEASEs the kernel sent before them.
//
// A flock or an OFD lock belongs to its open file description and goes at
// its last close, which the kernel tells the filesystem with a RELEASE. On
// a local filesystem the lock is gone when that close(2) returns; FUSE
// sends RELEASE asynchronously (the closing process does not wait for its
// answer), so the next GETLK or SETLK of another process, which the
// kernel queues after the RELEASE, could reach the lock document first
// and find the lock still held (xfstests generic/478: a child sharing the
// file table, CLONE_FILES, closes the only descriptor of an OFD-locked
// open file; another process's F_OFD_GETLK must then find the range
// free). So each lock request of a node waits until the RELEASEs of that
// node under way when it arrived have given their locks back.
//
// What this orders: requests that go-fuse read from the kernel's queue in
// that order and that reached this wrapper in it, which is every pair but
// one whose RELEASE's goroutine is held off the CPU between reading the
// request and calling here (microseconds) for longer than it takes the
// other process to learn of the close and ask. Another mount cannot see
// this mount's queue: there the lock is free once the RELEASE's write of
// the lock document lands, milliseconds after the close. A process's
// POSIX record locks need none of this: they go with the FLUSH of any
// close, which the closing process waits for (Handle.Flush).
//
// The kernel may also send the RELEASE after the next request: a RELEASE
// is a background request, and the kernel holds background requests in a
// queue of its own while max_background of them are under way, where a
// later GETLK does not wait. What comes before it, always, is the close's
// FLUSH, which the closing process waits for. So a lock request also
// waits, within closingWait, for the RELEASE of each other open file of
// the node that took a lock and has been flushed since: a close that may
// have been its last. An open file seen again after its flush (a lock
// request through it) was not closed for good, and is not waited for; one
// that stays open (a dup was closed) costs that wait to the lock requests
// of other open files of its node until it is seen again or released.
//
// An OPEN of a node waits, the same way, until those releases have ended:
// the file is closed for the process that reopens it (cat f; cat f), and
// must be for the mount too. Served before the release, the open would
// join the open file still there, as an open that is not the first, which
// keeps neither the kernel's pages nor the kept chunks (fs/vfs/doc.go):
// every byte of the reread was read again. The wait is what the release
// takes: giving its locks back and flushing what its close left, each
// bounded by the request timeout (vfs.Handle.Release).

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// closingWait bounds how long a lock request waits for the RELEASE of an
// open file whose close may have been its last: the kernel sends it at
// once, unless max_background requests are under way.
const closingWait = 250 * time.Millisecond

// releaseOrder tracks the RELEASEs (and RELEASEDIRs) under way.
type releaseOrder struct {
	mu sync.Mutex
	// byNode: the releases under way of each kernel node.
	byNode map[uint64]map[*pendingRelease]bool
	// byReq: the release served under each request's cancel channel, the
	// one thing of the request go-fuse hands to the node's Release.
	byReq map[<-chan struct{}]*pendingRelease
	// lockers: the open files (by file handle) of each node that asked for
	// a lock, until their release.
	lockers map[uint64]map[uint64]bool
	// flushed: those of lockers flushed since they were last seen, each
	// with a channel closed when it is seen again or its release begins.
	flushed map[uint64]map[uint64]chan struct{}
}

// pendingRelease is one release under way; done is closed once the locks
// of its open file are given back, ended once the release has ended.
type pendingRelease struct {
	done  chan struct{}
	once  sync.Once
	ended chan struct{}
}

func (p *pendingRelease) finish() { p.once.Do(func() { close(p.done) }) }

func (r *releaseOrder) init() {
	if r.byNode == nil {
		r.byNode, r.byReq = map[uint64]map[*pendingRelease]bool{}, map[<-chan struct{}]*pendingRelease{}
		r.lockers, r.flushed = map[uint64]map[uint64]bool{}, map[uint64]map[uint64]chan struct{}{}
	}
}

// begin registers the release of node's open file fh (of request c).
func (r *releaseOrder) begin(node, fh uint64, c <-chan struct{}) *pendingRelease {
	p := &pendingRelease{done: make(chan struct{}), ended: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if r.byNode[node] == nil {
		r.byNode[node] = map[*pendingRelease]bool{}
	}
	r.byNode[node][p] = true
	if c != nil {
		r.byReq[c] = p
	}
	r.seenLocked(node, fh)
	if delete(r.lockers[node], fh); len(r.lockers[node]) == 0 {
		delete(r.lockers, node)
	}
	return p
}

// locked notes that node's open file fh asked for a lock: its last close
// is then waited for by the lock requests of other open files.
func (r *releaseOrder) locked(node, fh uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.seenLocked(node, fh)
	if r.lockers[node] == nil {
		r.lockers[node] = map[uint64]bool{}
	}
	r.lockers[node][fh] = true
}

// flush notes a close of node's open file fh, which may be its last.
func (r *releaseOrder) flush(node, fh uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lockers[node][fh] || r.flushed[node][fh] != nil {
		return
	}
	if r.flushed[node] == nil {
		r.flushed[node] = map[uint64]chan struct{}{}
	}
	r.flushed[node][fh] = make(chan struct{})
}

// seenLocked: node's open file fh is open after all, or its release has
// begun; r.mu is held.
func (r *releaseOrder) seenLocked(node, fh uint64) {
	if ch := r.flushed[node][fh]; ch != nil {
		close(ch)
		if delete(r.flushed[node], fh); len(r.flushed[node]) == 0 {
			delete(r.flushed, node)
		}
	}
}

// waitClosing waits, within closingWait, until the open files of node
// other than fh flushed since they were last seen are seen again or
// their releases begin; false if the request c was interrupted meanwhile.
func (r *releaseOrder) waitClosing(node, fh uint64, c <-chan struct{}) bool {
	r.mu.Lock()
	r.seenLocked(node, fh) // a request through it: open
	var closing []chan struct{}
	for _, ch := range r.flushed[node] {
		closing = append(closing, ch)
	}
	r.mu.Unlock()
	if len(closing) == 0 {
		return true
	}
	timer := time.NewTimer(closingWait)
	defer timer.Stop()
	for _, ch := range closing {
		select {
		case <-ch:
		case <-timer.C:
			return true
		case <-c:
			return false
		}
	}
	return true
}

func (r *releaseOrder) end(node uint64, c <-chan struct{}, p *pendingRelease) {
	p.finish()
	close(p.ended)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byNode[node], p)
	if len(r.byNode[node]) == 0 {
		delete(r.byNode, node)
	}
	if c != nil {
		delete(r.byReq, c)
	}
}

// locksGone is called by a node's Release (under ctx, the request's) once
// the locks of its open file are given back: lock requests waiting for
// the release go on while it flushes.
func (r *releaseOrder) locksGone(ctx context.Context) {
	fc, ok := ctx.(*fuse.Context)
	if !ok {
		return
	}
	r.mu.Lock()
	p := r.byReq[fc.Cancel]
	r.mu.Unlock()
	if p != nil {
		p.finish()
	}
}

// wait waits until the releases of node under way now have given their
// locks back, or, if ended, have ended; false if the request c was
// interrupted meanwhile.
func (r *releaseOrder) wait(node uint64, c <-chan struct{}, ended bool) bool {
	r.mu.Lock()
	var before []*pendingRelease
	for p := range r.byNode[node] {
		before = append(before, p)
	}
	r.mu.Unlock()
	for _, p := range before {
		until := p.done
		if ended {
			until = p.ended
		}
		select {
		case <-until:
		case <-c:
			return false
		}
	}
	return true
}

// orderedFS is the node filesystem with lock requests and opens ordered
// after the releases before them.
type orderedFS struct {
	fuse.RawFileSystem
	r *releaseOrder
}

func (o orderedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	p := o.r.begin(in.NodeId, in.Fh, c)
	defer o.r.end(in.NodeId, c, p)
	o.RawFileSystem.Release(c, in)
}

func (o orderedFS) ReleaseDir(in *fuse.ReleaseIn) {
	p := o.r.begin(in.NodeId, in.Fh, nil)
	defer o.r.end(in.NodeId, nil, p)
	o.RawFileSystem.ReleaseDir(in)
}

func (o orderedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	o.r.flush(in.NodeId, in.Fh)
	return o.RawFileSystem.Flush(c, in)
}

// lockWait is what a lock request through node's open file fh waits for
// before it is served.
func (o orderedFS) lockWait(in *fuse.LkIn, c <-chan struct{}) bool {
	return o.r.waitClosing(in.NodeId, in.Fh, c) && o.r.wait(in.NodeId, c, false)
}

// setLk serves a SETLK or SETLKW; an open file that took a lock is
// waited for at its last close.
func (o orderedFS) setLk(c <-chan struct{}, in *fuse.LkIn, set func(<-chan struct{}, *fuse.LkIn) fuse.Status) fuse.Status {
	if !o.lockWait(in, c) {
		return fuse.EINTR
	}
	if in.Lk.Typ != syscall.F_UNLCK {
		o.r.locked(in.NodeId, in.Fh)
	}
	return set(c, in)
}

func (o orderedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if !o.r.wait(in.NodeId, c, true) {
		return fuse.EINTR
	}
	return o.RawFileSystem.Open(c, in, out)
}

func (o orderedFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	if !o.lockWait(in, c) {
		return fuse.EINTR
	}
	return o.RawFileSystem.GetLk(c, in, out)
}

func (o orderedFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return o.setLk(c, in, o.RawFileSystem.SetLk)
}

func (o orderedFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	return o.setLk(c, in, o.RawFileSystem.SetLkw)
}
