package campaign

import (
	"fmt"
	"strings"
	"time"

	"github.com/esfs/esfs/test/campaign/wire"
)

// finish ends a run that found nothing so far: every descriptor closed
// (their writes checked as any close's), every mount fsynced, then every
// mount's whole tree compared with the model and with the others', byte
// for byte, and esfs fsck.
func (r *Runner) finish() {
	r.mu.Lock()
	r.stopped = false // the closes below run as operations do
	for _, sl := range r.slots {
		sl.paused = true
	}
	r.mu.Unlock()
	for _, sl := range r.slots {
		r.mu.Lock()
		fds := r.fdsOf(sl.idx)
		r.mu.Unlock()
		for _, fd := range fds {
			r.exec(sl, &Op{Mount: sl.idx, Kind: "close", FD: fd.ID}, true)
		}
		r.exec(sl, &Op{Mount: sl.idx, Kind: "fsyncdir", Path: rootPath}, true)
	}
	r.waitIdle()
	r.mu.Lock()
	r.stopped = true
	failed := len(r.res.Findings) > 0 || r.res.Excluded != nil
	r.mu.Unlock()
	if failed {
		return
	}
	var trees [][]wire.Entry
	for _, sl := range r.slots {
		obs, err := r.observe(sl, []string{rootPath})
		r.mu.Lock()
		if err != nil {
			r.finding("hang", "the final look at m%d's tree: %v", sl.idx, err)
			r.mu.Unlock()
			return
		}
		d := r.diffTree(r.st, obs, []string{rootPath})
		var explain func() string
		if i := strings.Index(d, ": bytes read"); i > 0 {
			p := d[:i]
			if in := r.st.Get(p); in != nil {
				want, seqs := in.Data, r.writeSeqs(in.ID)
				explain = func() string { return r.explainData(sl, p, want, seqs) }
			}
		}
		r.mu.Unlock()
		if d != "" {
			more := ""
			if explain != nil {
				more = "; " + explain()
			}
			r.mu.Lock()
			class := "final-tree"
			if m := nlinkAt.FindStringSubmatch(d); m != nil {
				if in := r.st.Get(m[1]); in != nil && in.Kind == Dir {
					class = "dir-nlink"
				}
			}
			r.finding(class, "m%d at the end: %s%s", sl.idx, d, more)
			r.mu.Unlock()
		}
		trees = append(trees, obs[0])
	}
	for i := 1; i < len(trees); i++ {
		if d := diffEntries(trees[0], trees[i]); d != "" {
			r.mu.Lock()
			r.finding("final-tree", "m0 and m%d disagree at the end: %s", i, d)
			r.mu.Unlock()
		}
	}
	r.logf("the %d mounts agree with the model and with each other: %d entries", len(trees), len(trees[0]))
	if r.fs != nil {
		r.fsck()
	}
}

// diffEntries compares two mounts' trees, everything but times.
func diffEntries(a, b []wire.Entry) string {
	for i := 0; i < len(a) || i < len(b); i++ {
		if i >= len(a) || i >= len(b) {
			return fmt.Sprintf("%d entries against %d", len(a), len(b))
		}
		x, y := a[i], b[i]
		if x.Path != y.Path || x.Errno != y.Errno || x.Size != y.Size || x.Sum != y.Sum {
			return fmt.Sprintf("%q (%d bytes, %s) against %q (%d bytes, %s)", x.Path, x.Size, x.Sum, y.Path, y.Size, y.Sum)
		}
		if x.Stat == nil || y.Stat == nil {
			continue
		}
		s, t := *x.Stat, *y.Stat
		s.Ino, t.Ino, s.Mtime, t.Mtime = 0, 0, 0, 0
		if fmt.Sprint(s) != fmt.Sprint(t) {
			return fmt.Sprintf("%q: %+v against %+v", x.Path, s, t)
		}
	}
	return ""
}

// fsck: esfs fsck clean, after --repair of what dead mounts left (data
// chunks no inode covers, files they kept open without links).
func (r *Runner) fsck() {
	var out string
	var err error
	for try := 0; try < 20; try++ {
		out, err = r.fs.Run("fsck", "--no-wait")
		if err == nil || !onlyLeftovers(out) {
			break
		}
		r.logf("esfs fsck finds what dead mounts left:\n%s", out)
		if rep, err := r.fs.Run("fsck", "--repair", "--no-wait"); err != nil && !strings.Contains(rep, "all repaired") {
			r.logf("esfs fsck --repair: %v\n%s", err, rep)
		}
		time.Sleep(time.Second)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.finding("fsck", "esfs fsck: %v\n%s", err, out)
		return
	}
	r.logf("esfs fsck: %s", strings.SplitN(out, "\n", 2)[0])
}

// onlyLeftovers: every problem fsck reports is something a dead mount
// left, which --repair removes.
func onlyLeftovers(out string) bool {
	found := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "leftover data:"), strings.HasPrefix(l, "leftover unlinked file:"), strings.HasPrefix(l, "in flight"):
			found = true
		case strings.Contains(l, ": ") && !strings.HasPrefix(l, "checked"):
			return false
		}
	}
	return found
}
