package vfs

import (
	"errors"
	"testing"
)

// TestErrSeq: each open file description reports a write-back error once,
// at fsync or close; one opened later reports it only if nobody has; a
// gone inode's descriptions fail every time; a lost batch reaches every
// description's next fsync.
func TestErrSeq(t *testing.T) {
	e := &errSeq{}
	const file, other, made = 10, 11, 12
	a, b := e.sample(file), e.sample(file)
	o := e.sample(other)
	if err := e.check(file, &a, true); err != nil {
		t.Fatalf("nothing failed yet: %v", err)
	}

	chunk := errors.New("chunk write failed")
	e.fail(file, chunk)
	if err := e.check(file, &a, false); !errors.Is(err, chunk) {
		t.Fatalf("a's close: %v; want the chunk error", err)
	}
	if err := e.check(file, &a, true); err != nil {
		t.Fatalf("a's fsync after its close reported it: %v", err)
	}
	if err := e.check(other, &o, true); err != nil {
		t.Fatalf("another file's fsync: %v; a chunk error is its file's", err)
	}
	late := e.sample(file) // a has seen it: not reported to a later open
	if err := e.check(file, &late, true); err != nil {
		t.Fatalf("opened after a description saw it: %v", err)
	}
	if err := e.check(file, &b, true); !errors.Is(err, chunk) {
		t.Fatalf("b's fsync: %v; want the chunk error, which a's close did not take away", err)
	}

	lost := errors.New("batch lost")
	e.lose(lost, []uint64{made}, []uint64{file}, map[uint64]bool{file: true, made: true})
	m := ErrSince{}
	if err := e.check(file, &a, false); !errors.Is(err, lost) {
		t.Fatalf("a's close after the loss: %v", err)
	}
	if err := e.check(file, &a, true); err != nil {
		t.Fatalf("a's fsync after its close reported the loss: %v", err)
	}
	if err := e.check(other, &o, false); err != nil {
		t.Fatalf("close of a file the batch did not touch: %v", err)
	}
	if err := e.check(other, &o, true); !errors.Is(err, lost) {
		t.Fatalf("fsync of a file the batch did not touch: %v; fsync covers the whole batch", err)
	}
	if err := e.check(other, &o, true); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := e.check(made, &m, i%2 == 0); !errors.Is(err, lost) {
			t.Fatalf("call %d on a file the lost batch made: %v; it exists nowhere", i, err)
		}
	}
	if e.gone(made) == nil || e.gone(file) != nil {
		t.Fatalf("gone: made %v, file %v", e.gone(made), e.gone(file))
	}
	if err := e.unseen(); err != nil {
		t.Fatalf("unseen after descriptions reported the loss: %v", err)
	}

	// Marks of files no longer open are dropped once seen.
	e.forget(made)
	e.forget(file)
	if len(e.inodes) != 0 {
		t.Fatalf("marks left after the last close: %v", e.inodes)
	}
}
