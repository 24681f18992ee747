package campaign

import (
	"fmt"
	"time"
)

// The advisory locks the workers hold, as the model has them. A lock
// released (an unlock, a close, its mount's death) may still be seen held
// by another mount for a while (a release at close reaches the daemon
// after close returns; a release whose write failed is retried in the
// background; a dead mount's locks go when it is declared dead): until
// `until`, a conflict with it may or may not be reported.

type holder struct {
	owner string // "m1/fd3" for a flock, "m1/w0" (a worker process) for fcntl
	posix bool
	seg   int // fcntl: the segment; flock: -1
	ex    bool
	mount int
	until time.Time // zero: held; else released, maybe seen until then
}

type lockTable struct {
	byIno map[int][]*holder
}

func (l *lockTable) prune(ino int, now time.Time) []*holder {
	var keep []*holder
	for _, h := range l.byIno[ino] {
		if h.until.IsZero() || now.Before(h.until) {
			keep = append(keep, h)
		}
	}
	l.byIno[ino] = keep
	return keep
}

// conflicts: which of the inode's holders conflict with owner taking
// segs (posix) or the whole file (flock), exclusively or not: those
// certainly held, and those that may still be seen.
func (l *lockTable) conflicts(ino int, owner string, posix bool, segs [2]int, ex bool, now time.Time) (held, maybe []*holder) {
	for _, h := range l.prune(ino, now) {
		if h.owner == owner || h.posix != posix || (!ex && !h.ex) {
			continue
		}
		if posix && (h.seg < segs[0] || h.seg > segs[1]) {
			continue
		}
		if h.until.IsZero() {
			held = append(held, h)
		} else {
			maybe = append(maybe, h)
		}
	}
	return held, maybe
}

// take records owner's grant (replacing what it held there).
func (l *lockTable) take(ino int, owner string, mount int, posix bool, segs [2]int, ex bool) {
	l.release(ino, func(h *holder) bool {
		return h.owner == owner && (!posix || h.seg >= segs[0] && h.seg <= segs[1])
	}, time.Time{})
	if !posix {
		segs = [2]int{-1, -1}
	}
	for s := segs[0]; s <= segs[1]; s++ {
		l.byIno[ino] = append(l.byIno[ino], &holder{owner: owner, posix: posix, seg: s, ex: ex, mount: mount})
	}
}

// release turns what match selects into a lock that may be seen until
// until (dropped at once if until is zero: the owner's own new grant
// replaces it).
func (l *lockTable) release(ino int, match func(*holder) bool, until time.Time) {
	var keep []*holder
	for _, h := range l.byIno[ino] {
		if h.until.IsZero() && match(h) {
			if until.IsZero() {
				continue
			}
			h.until = until
		}
		keep = append(keep, h)
	}
	l.byIno[ino] = keep
}

// releaseAll releases every lock match selects, on every inode.
func (l *lockTable) releaseAll(match func(*holder) bool, until time.Time) {
	for ino := range l.byIno {
		l.release(ino, match, until)
	}
}

func (l *lockTable) heldFlock(owner string) bool {
	for _, hs := range l.byIno {
		for _, h := range hs {
			if h.owner == owner && h.until.IsZero() {
				return true
			}
		}
	}
	return false
}

func (h *holder) String() string {
	typ := "sh"
	if h.ex {
		typ = "ex"
	}
	s := fmt.Sprintf("%s %s", h.owner, typ)
	if h.posix {
		s += fmt.Sprintf(" seg %d", h.seg)
	}
	if !h.until.IsZero() {
		s += " (released, may be seen until " + h.until.Format("15:04:05.000") + ")"
	}
	return s
}
