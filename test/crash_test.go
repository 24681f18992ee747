package test

// Crash and recovery: real mounts on one index, killed (ESFS_CRASH_POINT,
// SIGKILL) or paused (SIGSTOP/SIGCONT) in the middle of the protocol, and a
// survivor that must finish or undo their work within lease + grace (a
// mount silent for its lease plus half of it is declared dead). After each scenario the index is
// checked against the invariants: no path document carries an intent, no
// duplicate path or inode, every document's parent exists and is a
// directory, no lock document and no unfinished operation record is left;
// and the files acknowledged to the test exist exactly once where the
// acknowledged operations put them, read through a mount.
//
// The helpers these tests share with the rename and failure tests (the
// model of the expected tree, the bounds of recovery) are in mounttest
// (tree.go, lease.go). Lines starting
// "REPORT" in the test log are measurements (recovery times, outcomes) worth
// reading when a change touches the protocol.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// recoveryPerDoc: on top of mounttest.RecoveredWithin, the survivor's own
// work of finishing or undoing a rename grows with the documents it moved
// (a scan and two bulk items each); under -race on a loaded 2-core machine
// about 1 ms, 2.7 ms with other tests running beside, and 4.2 ms with the
// suite's two shards beside (5,000 documents in 21 s). The bound is a
// sanity bound; that the survivor never waited out a lock's timeout is
// checked on its metrics (esfs_lock_acquire_seconds{result="timeout"}).
const recoveryPerDoc = 6 * time.Millisecond

// crWaitDeclaredDead waits until session id is declared dead and returns
// how long after since.
func crWaitDeclaredDead(t *testing.T, f *mounttest.FS, id string, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit+time.Minute)
	defer cancel()
	for {
		s, err := f.Store.GetSession(ctx, id)
		if err == nil && s.Dead {
			return time.Since(since)
		}
		if time.Since(since) > limit {
			t.Fatalf("session %s not declared dead within %s (last read: %+v, %v)", id, limit, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crCase is one crash of a rename at a crash point: prepare builds the tree
// through the survivor B (or the index), A runs `mv src dst` and kills
// itself at point; B must then show before (point before the commit) or
// after (at or after it), cleanly, within mounttest.RecoveredWithin.
type crCase struct {
	point     string
	committed bool
	prepare   func(t *testing.T, f *mounttest.FS, b *mounttest.Mount)
	src, dst  string
	before    mounttest.Tree
	after     mounttest.Tree
	check     func(t *testing.T, f *mounttest.FS, b *mounttest.Mount)
}

// crCrash runs c and returns the recovery time, from A's death to B
// showing a finished, consistent state.
func crCrash(t *testing.T, c crCase) time.Duration {
	f := mounttest.NewFS(t)
	b := mounttest.MountUncached(t, f, nil)
	c.prepare(t, f, b)
	a := mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=" + c.point})
	mv := mounttest.Background(func() mounttest.Result {
		return mounttest.Exec(2*time.Minute, "/", "mv", "-T", a.Path(c.src), a.Path(c.dst))
	})
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatalf("mount A did not die at %s", c.point)
	}
	died := time.Now()
	a.Kill() // reap, and lazily unmount its dead mount point
	if !strings.Contains(a.Log(), "crash point "+c.point+" reached") {
		t.Fatalf("mount A exited without reaching %s:\n%s", c.point, a.Log())
	}
	want := c.before
	if c.committed {
		want = c.after
	}
	took, ok := mounttest.WaitClean(t, f, b, want, died, mounttest.RecoveredWithin+30*time.Second)
	r := mounttest.WaitResult(t, "mv on the dead mount", mv, time.Minute)
	t.Logf("mv on the mount that died: %v %s", r.Err, strings.TrimSpace(r.Out))
	bound := mounttest.RecoveredWithin + time.Duration(want.Count())*recoveryPerDoc
	if ok && took > bound {
		t.Errorf("recovery after %s took %s, bound %s", c.point, took.Round(time.Millisecond), bound)
	}
	mounttest.FinalCheck(t, f, b, want)
	if c.check != nil {
		c.check(t, f, b)
	}
	return took
}

// TestCrashDuringDirRenameIsFinishedOrUndone kills a mount at every crash point of a directory rename
// and measures how long a survivor takes to finish or undo it.
func TestCrashDuringDirRenameIsFinishedOrUndone(t *testing.T) {
	small := []string{"a", "b", "sub/c", "sub/deeper/d", "e"}
	big := mounttest.Names(2500) // > 2 pages of 1000: rename-mid-stage fires after the 2nd
	var report []string
	for _, p := range []struct {
		point     string
		committed bool
	}{
		{"rename-after-record", false},
		{"rename-mid-stage", false},
		{"rename-before-commit", false},
		{"rename-after-commit", true},
		{"rename-mid-finish", true},
		{"rename-before-release", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			names := small
			if p.point == "rename-mid-stage" {
				names = big
			}
			took := crCrash(t, crCase{
				point: p.point, committed: p.committed, src: "src", dst: "dst",
				prepare: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					mounttest.Populate(t, f, "/src", names, mounttest.Content)
				},
				before: mounttest.NewTree().Add("src", names),
				after:  mounttest.NewTree().Add("dst", names),
			})
			report = append(report, fmt.Sprintf("%s (%d files): %s", p.point, len(names), took.Round(10*time.Millisecond)))
		})
	}
	t.Logf("REPORT recovery times after a crash (lease %s, bound %s):\n  %s", mounttest.Lease, mounttest.RecoveredWithin, strings.Join(report, "\n  "))
}

// TestCrashDuringRenameOverFileKeepsOneInode: a file renamed over an
// existing file (as git, rsync and editors do; no create-if-absent helps), killed at every stage; before the commit both files keep
// their contents and inodes, after it the target has the source's and the
// replaced inode is gone.
func TestCrashDuringRenameOverFileKeepsOneInode(t *testing.T) {
	var report []string
	for _, p := range []struct {
		point     string
		committed bool
	}{
		{"rename-after-record", false},
		{"rename-before-commit", false},
		{"rename-after-commit", true},
		{"rename-mid-finish", true},
		{"rename-before-release", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			var oldIno, newIno uint64
			before, after := mounttest.NewTree(), mounttest.NewTree()
			before.Files["src"], before.Files["dst"], before.Files["keep"] = "new\n", "old\n", "keep\n"
			after.Files["dst"], after.Files["keep"] = "new\n", "keep\n"
			took := crCrash(t, crCase{
				point: p.point, committed: p.committed, src: "src", dst: "dst",
				prepare: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					for name, c := range before.Files {
						if err := os.WriteFile(b.Path(name), []byte(c), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					var st syscall.Stat_t
					if err := syscall.Lstat(b.Path("dst"), &st); err != nil {
						t.Fatal(err)
					}
					oldIno = st.Ino
					if err := syscall.Lstat(b.Path("src"), &st); err != nil {
						t.Fatal(err)
					}
					newIno = st.Ino
				},
				before: before, after: after,
				check: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					var st syscall.Stat_t
					if err := syscall.Lstat(b.Path("dst"), &st); err != nil {
						t.Fatal(err)
					}
					want := oldIno
					if p.committed {
						want = newIno
					}
					if st.Ino != want {
						t.Errorf("dst is inode %d, want %d (old %d, new %d)", st.Ino, want, oldIno, newIno)
					}
					_, err := f.Store.GetInode(context.Background(), oldIno)
					switch {
					case p.committed && err == nil:
						t.Errorf("the replaced inode %d still exists after the rename committed (a leaked link)", oldIno)
					case !p.committed && err != nil:
						t.Errorf("the target's inode %d is gone although the rename was rolled back: %v", oldIno, err)
					}
				},
			})
			report = append(report, fmt.Sprintf("%s: %s", p.point, took.Round(10*time.Millisecond)))
		})
	}
	t.Logf("REPORT recovery times, rename over an existing file:\n  %s", strings.Join(report, "\n  "))
}

// TestCrashFrozenRenameOwnerIsFencedAfterTakeover: the owner of a large
// directory rename is paused (SIGSTOP) right after its commit, past lease + grace.
// The survivor declares it dead, rolls the rename forward, renames the
// same paths again and creates files there. Then the owner wakes: its
// late writes must change nothing, its rename (answered at its commit
// point) reports that it happened, and it must go on working under a new
// session. A frozen process cannot tell it
// was frozen: only a compare-and-set on its session document, made by the
// mount that declares it dead, stops its later writes.
func TestCrashFrozenRenameOwnerIsFencedAfterTakeover(t *testing.T) {
	f := mounttest.NewFS(t)
	metricsAddr := mounttest.FreeAddr(t)
	b := mounttest.MountUncached(t, f, nil, "--metrics-addr", metricsAddr)
	a := mounttest.MountUncached(t, f, nil)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) }) // before the mount's own cleanup
	names := mounttest.Names(5000)
	mounttest.Populate(t, f, "/src", names, mounttest.Content)
	sessA := mounttest.Session(t, f, a)

	// rename(2) itself, not mv: GNU mv (9.1) retries a rename that failed
	// with any errno (it lstats dst and calls renameat again, or, without
	// -T, moves src into dst when dst is now a directory), and that retry
	// is a new operation that A's new session rightly carries out. The
	// test wants the errno of the one rename that was fenced off.
	mv := mounttest.Background(func() mounttest.Result {
		s := time.Now()
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return mounttest.Result{Err: err, Took: time.Since(s), End: time.Now()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var op store.OpRecord
	start := time.Now()
	for op.ID == "" {
		recs, err := f.Store.SearchOps(ctx, store.OpCommitted)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Src == "/src" && r.Owner == sessA.ID {
				op = r
			}
		}
		if op.ID != "" {
			break
		}
		select {
		case r := <-mv:
			t.Fatalf("the rename finished (%v) before its commit was seen: nothing to pause", r.Err)
		default:
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatal("the rename did not commit within 3 minutes")
		}
	}
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	rec, err := f.Store.GetOp(ctx, op.ID)
	t.Logf("A stopped %s after its rename started; its operation %s is %s at the stop (%v)", stopped.Sub(start).Round(time.Millisecond), op.ID, rec.State, err)
	if rec.State == store.OpDone {
		t.Logf("REPORT %s: A finished its rename before the stop landed; the zombie has nothing left to do", t.Name())
	}

	// B takes over and rolls forward.
	took, ok := mounttest.WaitClean(t, f, b, mounttest.NewTree().Add("dst", names), stopped, mounttest.RecoveredWithin+30*time.Second)
	if !ok {
		t.FailNow()
	}
	t.Logf("REPORT %s: B finished A's committed rename of %d files %s after A was stopped", t.Name(), len(names), took.Round(10*time.Millisecond))
	if bound := mounttest.RecoveredWithin + time.Duration(len(names))*recoveryPerDoc; took > bound {
		t.Errorf("recovery took %s, bound %s", took.Round(time.Millisecond), bound)
	}
	// What the bound guards, told without a clock: B never waited out
	// a lock's timeout.
	if n := mounttest.Sample(mounttest.Scrape(t, "http://"+metricsAddr+"/metrics"), "esfs_lock_acquire_seconds", "result", "timeout"); n > 0 {
		t.Errorf("B waited out --lock-timeout %v times while recovering", n)
	}
	if rec, err := f.Store.GetOp(ctx, op.ID); err != nil || rec.Owner == sessA.ID || rec.State != store.OpDone {
		t.Errorf("after recovery the record is %+v (%v); want DONE, taken over by another session", rec, err)
	}

	// B renames the same paths again and creates files there.
	if err := os.Rename(b.Path("dst"), b.Path("src")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(b.Path("dst"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dst/b-file", "src/b-new"} {
		if err := os.WriteFile(b.Path(p), []byte("from B\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if time.Since(stopped) < 2*mounttest.RecoveredWithin {
		time.Sleep(2*mounttest.RecoveredWithin - time.Since(stopped)) // keep A stopped well past lease + grace
	}

	a.Signal(syscall.SIGCONT)
	r := mounttest.WaitResult(t, "A's rename after SIGCONT", mv, time.Minute)
	t.Logf("REPORT %s: A's rename(2) after waking: %v", t.Name(), r.Err)
	// A rename is answered at its commit point, and this one committed
	// before the stop: it happened, and A says so, before the stop or as
	// it wakes. Only if A, stopped between its commit and its answer,
	// could not finish making the subtree searchable does it finish in
	// the call, meet the takeover and answer EIO (the rename happened
	// all the same, as the tree checks below show).
	if r.Err != nil && !errors.Is(r.Err, syscall.EIO) {
		t.Errorf("A's rename, committed before A was stopped, reported %v; want success (or EIO)", r.Err)
	}
	renewed := mounttest.WaitLog(t, a, "started a new session", 15*time.Second)
	t.Logf("A started a new session %s after SIGCONT (waited)", renewed.Round(time.Millisecond))
	if err := os.WriteFile(a.Path("after-a"), []byte("A lives\n"), 0o644); err != nil {
		t.Errorf("a create in A under its new session: %v", err)
	}

	want := mounttest.NewTree().Add("src", names)
	want.Files["src/b-new"] = "from B\n"
	want.Files["dst/b-file"] = "from B\n"
	want.Files["after-a"] = "A lives\n"
	if _, ok := mounttest.WaitClean(t, f, b, want, time.Now(), 20*time.Second); !ok {
		t.FailNow()
	}
	mounttest.FinalCheck(t, f, b, want)
	if probs := mounttest.VerifyEventually(a, want, "", false); len(probs) > 0 {
		t.Errorf("A's view after it woke up:\n  %s", mounttest.JoinCapped(probs, 20))
	}
}

// TestCrashFrozenCreatorLeavesNoOrphan: a mount creating
// entries (directories) in d/s0..d/s15 is paused while some of its creates
// hold their locks; another mount, once the first is declared dead,
// removes d and everything in it; the first wakes. Its pending creates
// must fail (EIO: its entries were removed), and nothing of it may turn
// up, even when d/sK are made again. Whether the pause lands between a
// create's locked re-check and its write (the case that orphans) is down
// to timing: it does in some runs, not all.
func TestCrashFrozenCreatorLeavesNoOrphan(t *testing.T) {
	f := mounttest.NewFS(t)
	b := mounttest.MountUncached(t, f, nil)
	a := mounttest.MountUncached(t, f, nil)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	const creators = 16
	for k := 0; k < creators; k++ {
		if err := os.MkdirAll(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sessA := mounttest.Session(t, f, a)
	// mkdir: the create alone, so that a large share of each creator's
	// time is between its locked re-check and its write, the window this
	// test wants the stop to land in.
	cr := mounttest.Creator{Mkdir: true}
	// One directory per creator: the kernel serialises creates in one
	// directory (its inode lock), and the point is to catch creates
	// holding their locks at the stop.
	cr.Run(a, creators, "w", func(k int) string { return fmt.Sprintf("d/s%d", k) })
	time.Sleep(1500 * time.Millisecond)
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	dead := crWaitDeclaredDead(t, f, sessA.ID, stopped, mounttest.RecoveredWithin+10*time.Second)
	t.Logf("A declared dead %s after SIGSTOP", dead.Round(time.Millisecond))
	rm := mounttest.Exec(time.Minute, b.Dir, "rm", "-rf", "d")
	if rm.Err != nil {
		t.Errorf("rm -rf d in B while A is stopped: %v %s", rm.Err, rm.Out)
	}
	t.Logf("REPORT %s: rm -rf d in B (A declared dead) took %s", t.Name(), rm.Took.Round(time.Millisecond))
	a.Signal(syscall.SIGCONT)
	woke := time.Now()
	time.Sleep(time.Second) // let the creators meet the missing d
	ops := cr.Finish(t)

	var acked, inflight, okPending []string
	eio := 0
	for _, op := range ops {
		if op.Err == nil && op.End.Before(stopped) {
			acked = append(acked, op.Name)
		}
		// A create (the locked operation) pending across the stop.
		if op.Start.Before(stopped) && op.Created.After(woke) {
			res := mounttest.Errno(op.Err)
			if op.Step != "create" {
				// Legitimate when its last request (the release) was
				// applied before the stop and only the answer was
				// pending; not if it wrote after B removed its parent
				// (checked against the orphans below).
				res = "ok"
				okPending = append(okPending, "/"+op.Path)
			}
			inflight = append(inflight, op.Path+": "+res)
		}
		if op.End.After(woke) && errors.Is(op.Err, syscall.EIO) {
			eio++
		}
	}
	t.Logf("REPORT %s: %d creates acknowledged before the stop; creates pending across the stop: %s; EIO after waking: %d",
		t.Name(), len(acked), strings.Join(inflight, ", "), eio)
	mounttest.WaitLog(t, a, "started a new session", 15*time.Second)

	// Quiescence: no lock, record or intent. Orphans are reported.
	var probs, orphans []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		probs, orphans, _ = mounttest.IndexProblems(t, f, false)
		if len(probs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(probs) > 0 {
		t.Errorf("index after A woke:\n  %s", mounttest.JoinCapped(probs, 20))
	}
	t.Logf("REPORT %s: orphan path documents (parent missing) left in the index: %d %s", t.Name(), len(orphans), mounttest.JoinCapped(orphans, 5))
	for _, p := range okPending {
		for _, o := range orphans {
			if strings.HasPrefix(o, fmt.Sprintf("%q", p)) {
				t.Errorf("the create of %s reported success, but wrote after B removed its parent (an orphan)", p)
			}
		}
	}

	// A new d (and new d/sK) must not show anything of the old ones.
	want := mounttest.NewTree()
	for k := 0; k < creators; k++ {
		want.Dirs[fmt.Sprintf("d/s%d", k)] = true
		if err := os.MkdirAll(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*mounttest.Mount{b, a} {
		if probs := mounttest.VerifyMount(m, want, false); len(probs) > 0 {
			t.Errorf("new d/sK directories, listed through %s, show files of the old ones:\n  %s", m.Dir, mounttest.JoinCapped(probs, 10))
		}
	}
	if rm := mounttest.Exec(time.Minute, b.Dir, "rm", "-r", "d"); rm.Err != nil {
		t.Errorf("rm -r of the new d: %v %s", rm.Err, rm.Out)
	}
	// Orphans were reported above; everything else must hold.
	probs, _, notes := mounttest.IndexProblems(t, f, true)
	probs = append(probs, mounttest.VerifyMount(b, mounttest.NewTree(), true)...)
	if len(probs) > 0 {
		t.Errorf("final check:\n  %s", mounttest.JoinCapped(probs, 20))
	}
	if len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
}

// TestCrashKilledCreatorsDirectoryCanBeRemoved: a mount creating
// files in d is killed at a random point between its writes; another mount
// then removes d with rm -rf, which must succeed (not ENOTEMPTY forever,
// which a count of children that overcounts would give, and not an
// orphaned subtree, which one that undercounts would). esfs keeps no child count (rmdir refreshes and
// searches), so this checks that the search-based emptiness test holds up.
func TestCrashKilledCreatorsDirectoryCanBeRemoved(t *testing.T) {
	f := mounttest.NewFS(t)
	b := mounttest.MountUncached(t, f, nil)
	a := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(b.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 8; k++ {
		if err := os.Mkdir(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cr mounttest.Creator
	cr.Run(a, 8, "w", func(k int) string { return fmt.Sprintf("d/s%d", k) })
	time.Sleep(1500 * time.Millisecond)
	a.Kill()
	killed := time.Now()
	ops := cr.Finish(t)
	acked := 0
	for _, op := range ops {
		if op.Err == nil {
			acked++
		}
	}
	// Listings of another mount's changes lag the index refresh interval
	// (1s, docs/consistency.md "Consistency model"): rm -r lists first, so wait that out.
	time.Sleep(1500 * time.Millisecond)
	rm := mounttest.Exec(time.Minute, b.Dir, "rm", "-rf", "d")
	t.Logf("REPORT %s: %d files acknowledged before the kill; rm -rf d in B: %v after %s (%s after the kill) %s",
		t.Name(), acked, rm.Err, rm.Took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), strings.TrimSpace(rm.Out))
	if rm.Err != nil {
		t.Errorf("rm -rf d after the creator died: %v %s", rm.Err, rm.Out)
	}
	if took, ok := mounttest.WaitClean(t, f, b, mounttest.NewTree(), killed, mounttest.RecoveredWithin+20*time.Second); ok {
		t.Logf("clean %s after the kill", took.Round(time.Millisecond))
	}
	mounttest.FinalCheck(t, f, b, mounttest.NewTree())
}

// TestCrashOfRecoveringMountIsRecoveredAgain: the owner of
// a large directory rename dies right after its commit; the mount that
// takes the record over dies too, halfway through rolling it forward (some
// documents finished, most not). A third mount must take the record over
// from the second (epoch 3) and finish the rename: every file at the new
// path exactly once, nothing left at the old one.
func TestCrashOfRecoveringMountIsRecoveredAgain(t *testing.T) {
	f := mounttest.NewFS(t)
	names := mounttest.Names(5000)
	mounttest.Populate(t, f, "/src", names, mounttest.Content)
	b := mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=resolve-after-first-page"})
	a := mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--write-delegations=false") // a journaled rename
	mv := mounttest.Background(func() mounttest.Result {
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return mounttest.Result{Err: err, End: time.Now()}
	})
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatal("mount A did not die after its commit")
	}
	a.Kill()
	r := mounttest.WaitResult(t, "A's rename", mv, time.Minute)
	t.Logf("A's rename(2) when A died: %v", r.Err)
	// B, the only survivor, takes over and dies after the first page of
	// its roll-forward.
	if _, ok := b.WaitExit(mounttest.RecoveredWithin + time.Minute); !ok {
		t.Fatalf("mount B did not die during its roll-forward:\n%s", b.Log())
	}
	died := time.Now()
	b.Kill()
	if !strings.Contains(b.Log(), "took over an operation of a dead mount") || !strings.Contains(b.Log(), "crash point resolve-after-first-page reached") {
		t.Fatalf("B died without taking over and starting the roll-forward:\n%s", b.Log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := f.Store.SearchOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The rename's record; with delegations there are also the fences
	// written when A's dead leases were dropped.
	var recs []store.OpRecord
	for _, r := range all {
		if r.Src == "/src" {
			recs = append(recs, r)
		}
	}
	if len(recs) != 1 || recs[0].State != store.OpCommitted || recs[0].Epoch != 2 {
		t.Fatalf("after B died the record should be COMMITTED at epoch 2: %+v", recs)
	}
	probs, _, _ := mounttest.IndexProblems(t, f, false)
	t.Logf("B left %d problems (documents half rolled forward), e.g. %s", len(probs), mounttest.JoinCapped(probs, 2))
	if len(probs) == 0 {
		t.Fatal("B finished everything before dying: the test provoked nothing")
	}
	c := mounttest.MountUncached(t, f, nil)
	want := mounttest.NewTree().Add("dst", names)
	took, ok := mounttest.WaitClean(t, f, c, want, died, mounttest.RecoveredWithin+30*time.Second+time.Duration(len(names))*recoveryPerDoc)
	t.Logf("REPORT %s: C finished the rename %s after B died", t.Name(), took.Round(10*time.Millisecond))
	if !ok {
		t.FailNow()
	}
	if rec, err := f.Store.GetOp(ctx, recs[0].ID); err != nil || rec.State != store.OpDone || rec.Epoch != 3 {
		t.Errorf("after C's recovery the record is %+v (%v); want DONE at epoch 3", rec, err)
	}
	mounttest.FinalCheck(t, f, c, want)
}

// TestCrashDuringDirMoveKeepsLinkCounts: a directory moved between
// directories moves one link from the old parent to the new one exactly
// once, also when the renaming mount is killed around its commit and a
// survivor finishes or undoes the rename (after a crash after its finish
// moved the counts, the survivor's finish must not move them again).
func TestCrashDuringDirMoveKeepsLinkCounts(t *testing.T) {
	before, after := mounttest.NewTree(), mounttest.NewTree()
	for _, d := range []string{"a", "a/keep", "a/src", "a/src/s1", "a/src/s1/s2", "a/src/s3", "b"} {
		before.Dirs[d] = true
		after.Dirs[strings.Replace(d, "a/src", "b/src", 1)] = true
	}
	before.Files["a/src/s1/f"], after.Files["b/src/s1/f"] = "f\n", "f\n"
	for _, p := range []struct {
		point     string
		committed bool
	}{
		{"rename-before-commit", false},
		{"rename-after-commit", true},
		{"rename-before-release", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			crCrash(t, crCase{
				point: p.point, committed: p.committed, src: "a/src", dst: "b/src",
				prepare: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					mounttest.Sh(t, b.Dir, `mkdir -p a/keep a/src/s1/s2 a/src/s3 b && echo f > a/src/s1/f`)
				},
				before: before, after: after,
				check: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					wantA, wantB := uint64(4), uint64(2)
					if p.committed {
						wantA, wantB = 3, 3
					}
					if a, bb := mounttest.Links(t, b.Path("a")), mounttest.Links(t, b.Path("b")); a != wantA || bb != wantB {
						t.Errorf("after the crash at %s: /a has %d links, /b %d; want %d and %d", p.point, a, bb, wantA, wantB)
					}
					mounttest.DirLinksAgree(t, b.Dir)
				},
			})
		})
	}
}
