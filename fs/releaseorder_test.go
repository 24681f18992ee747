package fs

import (
	"context"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A lock request waits for the releases of its node under way when it
// came, until each has given its locks back (or ended), and an open until
// each has ended; not for releases of other nodes or later ones; an
// interrupted request stops waiting.
func TestReleaseOrder(t *testing.T) {
	var r releaseOrder
	c1 := make(chan struct{})
	p1 := r.begin(7, 1, c1)
	other := r.begin(8, 1, nil)
	defer r.end(8, nil, other)

	waited, opened := make(chan bool, 1), make(chan bool, 1)
	go func() { waited <- r.wait(7, make(chan struct{}), false) }()
	go func() { opened <- r.wait(7, make(chan struct{}), true) }()
	select {
	case <-waited:
		t.Fatal("a lock request did not wait for the release of its node under way")
	case <-time.After(50 * time.Millisecond):
	}
	later := r.begin(7, 2, nil) // after the request came: not waited for
	defer r.end(7, nil, later)
	r.locksGone(&fuse.Context{Cancel: c1})
	select {
	case ok := <-waited:
		if !ok {
			t.Fatal("wait reported an interruption")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock request still waits after the release gave its locks back")
	}
	select {
	case <-opened:
		t.Fatal("an open did not wait for the end of the release of its node under way")
	case <-time.After(50 * time.Millisecond):
	}
	r.end(7, c1, p1)
	select {
	case ok := <-opened:
		if !ok {
			t.Fatal("wait reported an interruption")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the open still waits after the release ended")
	}
	r.locksGone(context.Background()) // not a FUSE request's: nothing

	// Interrupted while a release is under way.
	intr := make(chan struct{})
	close(intr)
	if r.wait(7, intr, true) {
		t.Error("an interrupted lock request reported its wait done")
	}
	if !r.wait(9, intr, false) {
		t.Error("a lock request of a node with no release under way waited")
	}
}

// A lock request waits for the release of another open file of its node
// that took a lock and was flushed since (a close that may be its last,
// its RELEASE not come yet: the kernel may queue it behind the request),
// until its release begins; not for one seen again since its flush (a
// lock request through it), nor for its own, nor past closingWait.
func TestReleaseOrderAfterFlush(t *testing.T) {
	var r releaseOrder
	never := make(chan struct{})
	r.locked(7, 1)
	r.locked(7, 2)
	r.flush(7, 1)
	r.flush(7, 3) // took no lock: not waited for

	waited := make(chan bool, 1)
	go func() { waited <- r.waitClosing(7, 4, never) && r.wait(7, never, false) }()
	select {
	case <-waited:
		t.Fatal("a lock request did not wait for the release of a flushed open file that took a lock")
	case <-time.After(closingWait / 5):
	}
	c := make(chan struct{})
	p := r.begin(7, 1, c)
	select {
	case <-waited:
		t.Fatal("a lock request did not wait for the locks of the release that came")
	case <-time.After(closingWait / 5):
	}
	r.locksGone(&fuse.Context{Cancel: c})
	select {
	case ok := <-waited:
		if !ok {
			t.Fatal("wait reported an interruption")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock request still waits after the release gave its locks back")
	}
	r.end(7, c, p)

	// Through the flushed open file itself: it is open, nothing to wait
	// for, then or by the lock requests of the others.
	r.flush(7, 2)
	if !r.waitClosing(7, 2, never) {
		t.Fatal("wait reported an interruption")
	}
	if len(r.flushed[7]) != 0 {
		t.Errorf("an open file seen through a lock request after its flush is still waited for: %v", r.flushed[7])
	}

	// Flushed and never released (a dup closed): waited for closingWait at most.
	r.flush(7, 2)
	start := time.Now()
	if !r.waitClosing(7, 4, never) {
		t.Fatal("wait reported an interruption")
	}
	if took := time.Since(start); took < closingWait {
		t.Errorf("a lock request waited %v for a flushed open file, want closingWait", took)
	}
	intr := make(chan struct{})
	close(intr)
	if r.waitClosing(7, 4, intr) {
		t.Error("an interrupted lock request reported its wait done")
	}
	// Its release forgets it.
	r.end(7, nil, r.begin(7, 2, nil))
	if len(r.lockers) != 0 || len(r.flushed) != 0 {
		t.Errorf("released open files still tracked: %v %v", r.lockers, r.flushed)
	}
}
