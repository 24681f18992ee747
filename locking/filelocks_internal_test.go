package locking

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/esfs/esfs/store"
)

// ranges renders one owner's entries, sorted: "w0-39 w60-99".
func ranges(hs []store.Holder) string {
	var out []string
	for _, h := range hs {
		end := fmt.Sprint(h.End)
		if h.End == ToEOF {
			end = "EOF"
		}
		out = append(out, fmt.Sprintf("%s%d-%s", h.Mode, h.Start, end))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestApplyFileLock: an owner's record locks split, merge and change mode
// as on a local filesystem (fcntl(2)); other owners' entries are left as
// they are.
func TestApplyFileLock(t *testing.T) {
	other := store.Holder{Session: "s", Owner: 2, Mode: store.FileRead, Start: 0, End: ToEOF}
	hs := []store.Holder{other}
	step := func(lk FileLock, want string) {
		t.Helper()
		lk.Owner = 1
		hs = applyFileLock(hs, "s", "s-lease1", lk)
		var own []store.Holder
		for _, h := range hs {
			if h.Owner == 1 {
				own = append(own, h)
			}
		}
		if got := ranges(own); got != want {
			t.Fatalf("after %+v: %q, want %q", lk, got, want)
		}
		if !slices.Contains(hs, other) {
			t.Fatalf("another owner's entry changed: %+v", hs)
		}
	}
	step(FileLock{Start: 0, End: 99, Write: true}, "w0-99")
	step(FileLock{Start: 40, End: 59, Unlock: true}, "w0-39 w60-99")
	step(FileLock{Start: 40, End: 59, Write: true}, "w0-99")
	step(FileLock{Start: 100, End: ToEOF}, "r100-EOF w0-99")
	step(FileLock{Start: 50, End: 149}, "r50-EOF w0-49")
	step(FileLock{Start: 10, End: 19, Unlock: true}, "r50-EOF w0-9 w20-49")
	step(FileLock{Start: 10, End: 19, Write: true}, "r50-EOF w0-49")
	step(FileLock{Start: 0, End: ToEOF, Unlock: true}, "")
	// A flock is its own kind: the same owner's record locks stay.
	step(FileLock{Start: 0, End: 9, Write: true}, "w0-9")
	hs = applyFileLock(hs, "s", "s-lease1", FileLock{Owner: 1, Start: 0, End: ToEOF, Write: true, Flock: true})
	hs = applyFileLock(hs, "s", "s-lease1", FileLock{Owner: 1, Start: 0, End: ToEOF, Unlock: true, Flock: true})
	step(FileLock{Start: 5, End: 5, Write: true}, "w0-9")
}

// TestHolderConflicts: who conflicts with whom.
func TestHolderConflicts(t *testing.T) {
	held := store.Holder{Session: "a", Owner: 1, Mode: store.FileWrite, Start: 10, End: 19}
	for _, c := range []struct {
		lk   FileLock
		me   string
		want bool
	}{
		{FileLock{Owner: 1, Start: 0, End: ToEOF, Write: true}, "a", false}, // the holder itself
		{FileLock{Owner: 1, Start: 0, End: ToEOF}, "b", true},               // same owner number, another mount
		{FileLock{Owner: 2, Start: 20, End: 29, Write: true}, "a", false},   // beside it
		{FileLock{Owner: 2, Start: 19, End: 19}, "a", true},                 // its last byte
		{FileLock{Owner: 2, Start: 0, End: ToEOF, Flock: true, Write: true}, "a", false},
	} {
		if got := holderConflicts(held, c.lk, c.me); got != c.want {
			t.Errorf("%+v from %s: conflict %v, want %v", c.lk, c.me, got, c.want)
		}
	}
	shared := store.Holder{Session: "a", Owner: 1, Mode: store.FileRead, Start: 0, End: ToEOF, Flock: true}
	if holderConflicts(shared, FileLock{Owner: 2, Start: 0, End: ToEOF, Flock: true}, "b") {
		t.Error("two shared flocks conflict")
	}
	if !holderConflicts(shared, FileLock{Owner: 2, Start: 0, End: ToEOF, Flock: true, Write: true}, "b") {
		t.Error("an exclusive flock does not conflict with a shared one")
	}
}
