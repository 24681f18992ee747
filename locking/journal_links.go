// What a finished rename does to link counts: directories gain or lose
// the link of a subdirectory moved or replaced, once per rename.

package locking

import (
	"context"
	"errors"
	"sync"

	"github.com/esfs/esfs/store"
)

// dirLinkDeltas is what a rename does to directories' link counts: a
// directory moved to another parent takes one link (its "..") from the
// old parent to the new one, and a replaced directory takes one from the
// destination's parent.
func dirLinkDeltas(rec store.OpRecord) map[uint64]int {
	out := map[uint64]int{}
	if rec.SrcType == store.TypeDir && rec.SrcParent != 0 && rec.DstParent != 0 && rec.SrcParent != rec.DstParent {
		out[rec.SrcParent]--
		out[rec.DstParent]++
	}
	if rec.Overwritten != 0 && rec.OverwrittenType == store.TypeDir && rec.DstParent != 0 {
		out[rec.DstParent]--
	}
	for ino, d := range out {
		if d == 0 {
			delete(out, ino)
		}
	}
	return out
}

// moveDirLinks applies link count changes to directories, each a
// read-modify-write of its own, all at once. A failure is logged: the
// count is then off, for fsck to repair, but the rename has happened.
func (j *Journal) moveDirLinks(ctx context.Context, deltas map[uint64]int) {
	var wg sync.WaitGroup
	for ino, d := range deltas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.b.AddDirLinks(ctx, ino, d, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
				j.log.Warn("could not move a directory link count of a rename (esfs fsck --repair counts it)", "ino", ino, "delta", d, "err", err)
			}
		}()
	}
	wg.Wait()
}
