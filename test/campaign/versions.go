package campaign

// The versions of each file's bytes, for the reads the model cannot
// judge exactly: a descriptor whose file another mount changed since it
// was opened (close-to-open: it need not see the change) may read the
// file as it was at any version since its open, but never one older than
// what it has read already, nor older than the file was when its open
// began.

import (
	"fmt"
	"strings"

	"github.com/esfs/esfs/test/campaign/wire"
)

// dataVer is one version of a file's bytes.
type dataVer struct {
	size int64
	sum  string
	// at is the number of the last operation dispatched when it was
	// made: an operation numbered above began after it.
	at    int64
	mount int // whose call made it
}

// noteData records file ino's bytes as a version of their own if they
// changed (r.mu held).
func (r *Runner) noteData(ino, mount int) {
	in := r.st.Inodes[ino]
	if ino == 0 || in == nil || in.Kind != File {
		return
	}
	v := dataVer{size: int64(len(in.Data)), sum: wire.Sum(in.Data), at: r.n, mount: mount}
	vs := r.dataHist[ino]
	if n := len(vs); n > 0 && vs[n-1].size == v.size && vs[n-1].sum == v.sum {
		return
	}
	r.dataHist[ino] = append(vs, v)
}

// noteAllData records the versions of every file, after the model was
// replaced whole (what a dead mount left, a truncate's halfway state).
func (r *Runner) noteAllData(mount int) {
	for id := range r.st.Inodes {
		r.noteData(id, mount)
	}
}

// openedAt says, of an open (op) that slot mount made, which version of
// its file it must see at least (the last made before it began; -1 none
// known) and whether it may see an older one than the model's now: a
// change made while it was opening (by any mount: it may have read the
// file before the change, and on the same mount the change may have
// been made on another open file) (r.mu held).
func (r *Runner) openedAt(op *Op, mount int) (floor int, stale bool) {
	floor = -1
	for i, v := range r.dataHist[op.Ino] {
		if v.at < op.N {
			floor = i
		} else {
			stale = true
		}
	}
	return floor, stale
}

// checkStaleRead judges a read through stale descriptor fd of ino that
// returned size bytes of digest sum: some version from the newest it
// read before (or was opened at) on, and never an older one alone. A
// read that is no version at all (a mix of pages read at different
// times) is not judged. It returns what is wrong ("" if nothing), and
// moves fd.seen on (r.mu held).
func (r *Runner) checkStaleRead(fd *FD, size int64, sum string) string {
	vs := r.dataHist[fd.Ino]
	lo := max(fd.floor, fd.seen, 0)
	newest, older := -1, -1
	for i, v := range vs {
		if v.size != size || v.sum != sum {
			continue
		}
		if i >= lo {
			newest = i
		} else {
			older = i
		}
	}
	switch {
	case newest >= 0:
		fd.seen = newest
		return ""
	case older >= 0:
		why := fmt.Sprintf("it read version %d before", fd.seen)
		if fd.seen <= fd.floor {
			why = fmt.Sprintf("the file was at version %d when its open began", fd.floor)
		}
		return fmt.Sprintf("read %d bytes (digest %s): version %d of the file, older than %d (%s); its versions: %s",
			size, sum, older, lo, why, r.versionsOf(fd.Ino))
	}
	r.logf("  fd%d read %d bytes (digest %s), no one version of ino%d (pages of several): not judged", fd.ID, size, sum, fd.Ino)
	return ""
}

// versionsOf lists file ino's versions, for a finding.
func (r *Runner) versionsOf(ino int) string {
	var b strings.Builder
	for i, v := range r.dataHist[ino] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d: %d bytes (%s) by m%d", i, v.size, v.sum, v.mount)
	}
	return b.String()
}

// olderVersion says, for a finding, what a read of file ino that
// returned size bytes of digest sum, instead of want, returned: an older
// version of the file, or want cut to an older version's size ("": none
// of these).
func (r *Runner) olderVersion(ino int, want []byte, size int64, sum string) string {
	vs := r.dataHist[ino]
	for i := len(vs) - 2; i >= 0; i-- {
		if vs[i].size == size && vs[i].sum == sum {
			return fmt.Sprintf(": the file as it was at version %d of %d (%d bytes, made by m%d)", i, len(vs)-1, vs[i].size, vs[i].mount)
		}
	}
	if size < int64(len(want)) && wire.Sum(want[:size]) == sum {
		for i := len(vs) - 2; i >= 0; i-- {
			if vs[i].size == size {
				return fmt.Sprintf(": the file's bytes cut to the size of its version %d of %d (made by m%d)", i, len(vs)-1, vs[i].mount)
			}
		}
		return ": the file's bytes, cut"
	}
	return ""
}
