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
	p1 := r.begin(7, c1)
	other := r.begin(8, nil)
	defer r.end(8, nil, other)

	waited, opened := make(chan bool, 1), make(chan bool, 1)
	go func() { waited <- r.wait(7, make(chan struct{}), false) }()
	go func() { opened <- r.wait(7, make(chan struct{}), true) }()
	select {
	case <-waited:
		t.Fatal("a lock request did not wait for the release of its node under way")
	case <-time.After(50 * time.Millisecond):
	}
	later := r.begin(7, nil) // after the request came: not waited for
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
