package vfs

import (
	"reflect"
	"testing"

	"github.com/esfs/esfs/store"
)

// TestSelfWrites: a delegated directory's own attributes, followed across
// this mount's writes of its document, are held again only when every
// write of a batch ended with a known outcome, and are then the document
// the last write left, whatever order the outcomes came back in.
func TestSelfWrites(t *testing.T) {
	v := func(n int64) store.Version { return store.Version{SeqNo: n, PrimaryTerm: 1} }
	base := store.Inode{Ino: 7, Type: store.TypeDir, Mode: 0o755, Nlink: 3, Mtime: 100, Ctime: 100, Ver: v(10)}
	withLinks := func(n uint32, t int64, ver int64) *store.Inode {
		a := base
		a.Nlink, a.Mtime, a.Ctime, a.Ver = n, t, t, v(ver)
		return &a
	}
	held := func() *dirState {
		return &dirState{ino: 7, self: base, hasSelf: true, names: map[string]dirEntry{}}
	}
	check := func(what string, st *dirState, want *store.Inode) {
		t.Helper()
		switch {
		case want == nil && st.hasSelf:
			t.Errorf("%s: holds %+v, want nothing", what, st.self)
		case want != nil && !st.hasSelf:
			t.Errorf("%s: holds nothing, want %+v", what, *want)
		case want != nil && !reflect.DeepEqual(st.self, *want):
			t.Errorf("%s: holds %+v, want %+v", what, st.self, *want)
		}
	}

	st := held()
	st.beginWrite()
	check("a write under way", st, &base) // its call has not returned
	st.endWrite(selfWrite{known: true, times: 200, ver: v(11)})
	check("a times update", st, withLinks(3, 200, 11))

	st = held()
	st.beginWrite()
	st.endWrite(selfWrite{known: true, full: withLinks(4, 200, 11)})
	check("a compare-and-set", st, withLinks(4, 200, 11))

	// Two writes at once, their outcomes back in the other order than
	// they landed in.
	st = held()
	st.beginWrite()
	st.beginWrite()
	st.endWrite(selfWrite{known: true, times: 300, ver: v(12)})
	check("one of two writes ended", st, nil)
	st.endWrite(selfWrite{known: true, full: withLinks(4, 200, 11)})
	check("a count, then times set", st, withLinks(4, 300, 12))

	st = held()
	st.beginWrite()
	st.beginWrite()
	st.endWrite(selfWrite{known: true, full: withLinks(4, 300, 12)})
	st.endWrite(selfWrite{known: true, times: 200, ver: v(11)})
	check("times set, then a count", st, withLinks(4, 300, 12))

	st = held()
	st.beginWrite()
	st.beginWrite()
	st.endWrite(selfWrite{known: true, full: withLinks(4, 200, 11)})
	st.endWrite(selfWrite{known: false})
	check("an outcome unknown", st, nil)

	st = held()
	st.beginWrite()
	st.mu.Lock()
	st.dropSelf() // another write of the document, not followed
	st.mu.Unlock()
	st.endWrite(selfWrite{known: true, times: 200, ver: v(12)})
	check("a write not followed during the batch", st, nil)

	// Nothing held when the batch began: a times update alone says
	// nothing of the rest, a compare-and-set says all.
	st = &dirState{ino: 7, names: map[string]dirEntry{}}
	st.beginWrite()
	st.endWrite(selfWrite{known: true, times: 200, ver: v(11)})
	check("times set on attributes not held", st, nil)
	st.beginWrite()
	st.endWrite(selfWrite{known: true, full: withLinks(4, 300, 12)})
	check("a compare-and-set on attributes not held", st, withLinks(4, 300, 12))

	// A read that ran during a write is not taken.
	st = &dirState{ino: 7, names: map[string]dirEntry{}}
	changes := st.changeCount()
	st.beginWrite()
	st.learnSelf(base, changes)
	check("a read during a write", st, nil)
	st.endWrite(selfWrite{known: false})
	st.learnSelf(base, changes)
	check("a read that began before a write ended", st, nil)
	st.learnSelf(base, st.changeCount())
	check("a read after", st, &base)
}
