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

// TestCoveredAndIntersect: which requests only give rights back, and the
// rights two states of one owner share.
func TestCoveredAndIntersect(t *testing.T) {
	e := func(mode store.LockMode, start, end int64) store.Holder {
		return store.Holder{Session: "s", Owner: 1, Mode: mode, Start: start, End: end}
	}
	w, r := store.FileWrite, store.FileRead
	own := []store.Holder{e(w, 0, 39), e(r, 40, 99), e(w, 200, ToEOF)}
	for _, c := range []struct {
		lk   FileLock
		want bool
	}{
		{FileLock{Start: 0, End: ToEOF, Unlock: true}, true},
		{FileLock{Start: 0, End: 99}, true},               // a downgrade, and a read lock held
		{FileLock{Start: 0, End: 99, Write: true}, false}, // 40-99 upgraded
		{FileLock{Start: 0, End: 39, Write: true}, true},  // held already
		{FileLock{Start: 90, End: 109}, false},            // 100-109 new
		{FileLock{Start: 300, End: ToEOF, Write: true}, true},
		{FileLock{Start: 150, End: 250}, false},
	} {
		if got := covered(own, c.lk); got != c.want {
			t.Errorf("covered(%s, %+v) = %v, want %v", ranges(own), c.lk, got, c.want)
		}
	}
	for _, c := range []struct {
		a, b []store.Holder
		want string
	}{
		{own, own, ranges(own)},
		{own, nil, ""},
		{[]store.Holder{e(w, 0, 99)}, []store.Holder{e(r, 0, 199)}, "r0-99"},
		{[]store.Holder{e(w, 0, 99)}, []store.Holder{e(w, 0, 9), e(w, 50, 59)}, "w0-9 w50-59"},
		{[]store.Holder{e(r, 0, ToEOF)}, []store.Holder{e(w, 10, 19), e(r, 20, 29)}, "r10-29"},
	} {
		if got := ranges(intersect(c.a, c.b)); got != c.want {
			t.Errorf("intersect(%s, %s) = %q, want %q", ranges(c.a), ranges(c.b), got, c.want)
		}
	}
	if !sameEntries(own, []store.Holder{own[2], own[0], own[1]}) || sameEntries(own, own[:2]) {
		t.Error("sameEntries does not compare as sets")
	}
}
