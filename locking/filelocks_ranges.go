// The arithmetic of file locks: an owner's byte ranges split, merged,
// compared and intersected, and who conflicts with whom.

package locking

import (
	"slices"
	"time"

	"github.com/esfs/esfs/store"
)

func lockMode(lk FileLock) store.LockMode {
	if lk.Write {
		return store.FileWrite
	}
	return store.FileRead
}

func overlaps(s1, e1, s2, e2 int64) bool { return s1 <= e2 && s2 <= e1 }

// holderConflicts reports whether entry h, of another owner than lk's,
// conflicts with lk.
func holderConflicts(h store.Holder, lk FileLock, me string) bool {
	if h.Mode != store.FileRead && h.Mode != store.FileWrite {
		return false
	}
	if h.Session == me && h.Owner == lk.Owner {
		return false
	}
	return h.Flock == lk.Flock && overlaps(h.Start, h.End, lk.Start, lk.End) && (h.Mode == store.FileWrite || lk.Write)
}

// applyFileLock returns holders with lk applied for its owner (of session
// me, under operation op): the owner's entries of lk's kind lose lk's
// range (split where it falls inside one), then lk's entry is added
// unless it is an unlock, and the owner's entries of one mode that touch
// or overlap are merged, as POSIX record locks behave on a local
// filesystem.
func applyFileLock(holders []store.Holder, me, op string, lk FileLock) []store.Holder {
	mine := func(h store.Holder) bool { return h.Session == me && h.Owner == lk.Owner && h.Flock == lk.Flock }
	var out, own []store.Holder
	for _, h := range holders {
		if !mine(h) {
			out = append(out, h)
			continue
		}
		if !overlaps(h.Start, h.End, lk.Start, lk.End) {
			own = append(own, h)
			continue
		}
		if h.Start < lk.Start {
			left := h
			left.End = lk.Start - 1
			own = append(own, left)
		}
		if h.End > lk.End {
			right := h
			right.Start = lk.End + 1
			own = append(own, right)
		}
	}
	if !lk.Unlock {
		own = append(own, store.Holder{Session: me, Op: op, Mode: lockMode(lk), Since: time.Now().UnixNano(),
			Owner: lk.Owner, Start: lk.Start, End: lk.End, Pid: lk.Pid, Flock: lk.Flock})
	}
	return append(out, mergeRanges(own)...)
}

// mergeRanges merges entries of one owner and mode that overlap or touch.
func mergeRanges(own []store.Holder) []store.Holder {
	var out []store.Holder
	for _, h := range own {
		merged := false
		for i := range out {
			o := &out[i]
			if o.Mode != h.Mode {
				continue
			}
			touch := overlaps(o.Start, o.End, h.Start, h.End) ||
				(o.End != ToEOF && o.End+1 == h.Start) || (h.End != ToEOF && h.End+1 == o.Start)
			if touch {
				o.Start, o.End = min(o.Start, h.Start), max(o.End, h.End)
				o.Pid, o.Since = h.Pid, max(o.Since, h.Since)
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, h)
		}
	}
	if len(out) < len(own) {
		return mergeRanges(out) // a merge may make two others touch
	}
	return out
}

func without(hs []store.Holder, gone store.Holder) []store.Holder {
	var out []store.Holder
	for _, h := range hs {
		if h != gone {
			out = append(out, h)
		}
	}
	return out
}

func withoutWaiter(ws []store.Waiter, session, op string) []store.Waiter {
	var out []store.Waiter
	for _, w := range ws {
		if w.Session != session || w.Op != op {
			out = append(out, w)
		}
	}
	return out
}

func mineOf(h store.Holder, me string, k ownerKey) bool {
	return h.Session == me && h.Owner == k.owner && h.Flock == k.flock
}

// ownerEntries returns the entries of owner k of session me in hs.
func ownerEntries(hs []store.Holder, me string, k ownerKey) []store.Holder {
	var out []store.Holder
	for _, h := range hs {
		if mineOf(h, me, k) {
			out = append(out, h)
		}
	}
	return out
}

// withoutOwner returns hs without the entries of owner k of session me.
func withoutOwner(hs []store.Holder, me string, k ownerKey) []store.Holder {
	var out []store.Holder
	for _, h := range hs {
		if !mineOf(h, me, k) {
			out = append(out, h)
		}
	}
	return out
}

// sameEntries reports whether two sets of one owner's entries lock the
// same bytes in the same modes (when they were taken, and by which pid,
// aside).
func sameEntries(a, b []store.Holder) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(h store.Holder) [3]int64 {
		w := int64(0)
		if h.Mode == store.FileWrite {
			w = 1
		}
		return [3]int64{h.Start, h.End, w}
	}
	ka, kb := make([][3]int64, len(a)), make([][3]int64, len(b))
	for i := range a {
		ka[i], kb[i] = key(a[i]), key(b[i])
	}
	cmp := func(x, y [3]int64) int { return slices.Compare(x[:], y[:]) }
	slices.SortFunc(ka, cmp)
	slices.SortFunc(kb, cmp)
	return slices.Equal(ka, kb)
}

// covered reports whether lk, applied to an owner's entries own, only
// gives rights back: an unlock, or a lock of bytes own already holds in
// that mode or a stronger one (a downgrade, or nothing at all).
func covered(own []store.Holder, lk FileLock) bool {
	if lk.Unlock {
		return true
	}
	next := lk.Start
	for {
		found := false
		for _, h := range own {
			if h.Start <= next && next <= h.End && (h.Mode == store.FileWrite || !lk.Write) {
				if h.End >= lk.End {
					return true
				}
				next, found = h.End+1, true
			}
		}
		if !found {
			return false
		}
	}
}

// intersect returns the rights that both a and b, entries of one owner,
// hold: the bytes both lock, each in the weaker of their two modes, with
// a's other fields.
func intersect(a, b []store.Holder) []store.Holder {
	var out []store.Holder
	for _, x := range a {
		for _, y := range b {
			if !overlaps(x.Start, x.End, y.Start, y.End) {
				continue
			}
			h := x
			h.Start, h.End = max(x.Start, y.Start), min(x.End, y.End)
			if y.Mode == store.FileRead {
				h.Mode = store.FileRead
			}
			out = append(out, h)
		}
	}
	return mergeRanges(out)
}
