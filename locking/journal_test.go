package locking_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// failingAfterCommit refuses every path-document bulk once a record has
// been committed, while failing is set: a cluster that accepted the commit
// and then went away for the finish.
type failingAfterCommit struct {
	*store.Store
	committed atomic.Bool
	failing   atomic.Bool
	refused   atomic.Int64
}

var errInjected = errors.New("injected: connection reset")

func (f *failingAfterCommit) Write(ctx context.Context, o store.BulkOp) (store.Version, error) {
	v, err := f.Store.Write(ctx, o)
	if err == nil && !f.committed.Load() {
		if recs, _ := f.Store.SearchOps(ctx, store.OpCommitted); len(recs) > 0 {
			f.committed.Store(true)
		}
	}
	return v, err
}

func (f *failingAfterCommit) Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	if f.committed.Load() && f.failing.Load() {
		f.refused.Add(1)
		return nil, errInjected
	}
	return f.Store.Bulk(ctx, ops)
}

func (f *failingAfterCommit) Refresh(ctx context.Context, which store.Searched) error {
	if f.committed.Load() && f.failing.Load() {
		return errInjected
	}
	return f.Store.Refresh(ctx, which)
}

func putDentries(t *testing.T, st *store.Store, ds ...store.Dentry) []store.Dentry {
	t.Helper()
	ops := make([]store.BulkOp, len(ds))
	for i, d := range ds {
		o := store.CreateDentry(d)
		if err := o.Err(); err != nil {
			t.Fatal(err)
		}
		ops[i] = o
	}
	res, err := st.Bulk(ctxT(t), ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ds[i].Ver = r.Ver
	}
	return ds
}

// TestOwnerFinishesBeforeReleasing: a rename whose
// finish fails after its commit, while its owner is alive, is reported
// done (it is: readers see the new path), keeps its locks so that nobody
// else touches those paths half finished, and is finished and released by
// its owner's sweeper once the cluster answers again.
func TestOwnerFinishesBeforeReleasing(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	fb := &failingAfterCommit{Store: st}
	// Not shorter: a heartbeat slowed past a 1 s lease on a loaded
	// machine cost the owner its session before the test could begin.
	const lease = 3 * time.Second
	co, err := locking.Start(ctx, fb, locking.Config{Strategy: "tree", Lease: lease, LockTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = co.Close(context.Background()) })
	other := coordinator(t, st, "tree", lease)

	src := putDentries(t, st, store.Dentry{Path: "/f", Parent: "/", Name: "f", Ino: 4242, Type: store.TypeFile})[0]
	fb.failing.Store(true)
	txn, err := co.Begin(ctx, co.Strategy.Rename("/f", "/g", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.Rename(ctx, locking.RenameSpec{Src: src, Dst: "/g"}); err != nil {
		t.Fatalf("a committed rename whose finish failed was reported as failed: %v", err)
	}
	co.Journal.WaitFinishing() // a file's finish runs in the background
	if err := txn.End(ctx); err != nil {
		t.Fatalf("End after a kept rename: %v", err)
	}
	if fb.refused.Load() == 0 {
		t.Fatal("the finish was never refused: the test injected nothing")
	}
	if n := co.Journal.Unfinished(); n != 1 {
		t.Fatalf("journal keeps %d unfinished renames, want 1", n)
	}
	// Readers already see the rename.
	seen, err := other.View.GetMany(ctx, []string{"/f", "/g"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		if !seen[i].Stored {
			t.Fatalf("%s: no document", []string{"/f", "/g"}[i])
		}
		if seen[i].Found != want {
			t.Errorf("%s visible=%v, want %v", []string{"/f", "/g"}[i], seen[i].Found, want)
		}
	}
	// The locks are still held: another mount's rename of /g waits.
	if _, err := other.Begin(ctx, other.Strategy.Rename("/g", "/h", nil)); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("another mount got the locks of an unfinished rename: %v", err)
	}
	fb.failing.Store(false)
	start := time.Now()
	for co.Journal.Unfinished() > 0 {
		if time.Since(start) > 10*lease {
			t.Fatalf("the owner did not finish its rename within %s of the cluster answering", 10*lease)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("finished and released %s after the cluster answered again (sweeper period %s)", time.Since(start).Round(time.Millisecond), lease/3)
	txn2, err := other.Begin(ctx, other.Strategy.Rename("/g", "/h", nil))
	if err != nil {
		t.Fatalf("locks not released after the finish: %v", err)
	}
	_ = txn2.End(ctx)
	res, err := st.GetDentries(ctx, []string{"/f", "/g"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, store.ErrNotFound) {
		t.Errorf("/f still has a document after the finish: %+v %v", res[0].Dentry, res[0].Err)
	}
	if res[1].Err != nil || res[1].Dentry.Intent.Op != "" {
		t.Errorf("/g after the finish: %+v %v", res[1].Dentry, res[1].Err)
	}
}

// TestSweeperCollectsStrays: a document carrying the intent of a finished
// operation (a late write of a request that timed out) is deleted, or
// stripped of its intent, by the next sweep; a finished operation's
// waiting marker of a live session is dropped too.
func TestSweeperCollectsStrays(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	co := coordinator(t, st, "tree", 2*time.Second)
	op := "late-1"
	if _, err := st.Write(ctx, store.CreateOp(store.OpRecord{ID: op, State: store.OpDone, Aborted: true, Owner: "gone", Epoch: 1, SrcType: store.TypeFile})); err != nil {
		t.Fatal(err)
	}
	putDentries(t, st,
		store.Dentry{Path: "/dst", Parent: "/", Name: "dst", Ino: 77, Type: store.TypeFile, Intent: store.Intent{Op: op, Role: store.RoleDst}},
		store.Dentry{Path: "/src", Parent: "/", Name: "src", Ino: 77, Type: store.TypeFile, Intent: store.Intent{Op: op, Role: store.RoleSrc}})
	// A waiting marker of an operation the live session has finished.
	sess := co.Session()
	wop, n := sess.BeginOp()
	sess.EndOp(n)
	if _, err := st.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: store.LockDoc{ID: store.LockID("/w"), Path: "/w",
		Waiters: []store.Waiter{{Session: sess.ID(), Op: wop, Ticket: "1", Since: time.Now().UnixNano()}}}}})); err != nil {
		t.Fatal(err)
	}
	if err := st.Refresh(ctx, store.SearchedPaths); err != nil {
		t.Fatal(err)
	}
	// Let a heartbeat publish that wop is finished.
	time.Sleep(2 * time.Second)
	if err := co.Sweep(ctx, map[string]time.Duration{}); err != nil {
		t.Fatal(err)
	}
	res, err := st.GetDentries(ctx, []string{"/dst", "/src"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, store.ErrNotFound) {
		t.Errorf("the stray destination of an aborted rename survived the sweep: %+v %v", res[0].Dentry, res[0].Err)
	}
	if res[1].Err != nil || res[1].Dentry.Intent.Op != "" {
		t.Errorf("the source of an aborted rename should stay, without intent: %+v %v", res[1].Dentry, res[1].Err)
	}
	locks, err := st.SearchLocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 0 {
		t.Errorf("a finished operation's waiting marker survived the sweep: %+v", locks)
	}
}

// requests counts every request the journal and the lock manager make.
type requests struct {
	*store.Store
	n atomic.Int64
}

func (r *requests) GetLocks(ctx context.Context, ids []string) ([]store.LockDoc, error) {
	r.n.Add(1)
	return r.Store.GetLocks(ctx, ids)
}
func (r *requests) Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	r.n.Add(1)
	return r.Store.Bulk(ctx, ops)
}
func (r *requests) Write(ctx context.Context, o store.BulkOp) (store.Version, error) {
	r.n.Add(1)
	return r.Store.Write(ctx, o)
}
func (r *requests) GetOp(ctx context.Context, id string) (store.OpRecord, error) {
	r.n.Add(1)
	return r.Store.GetOp(ctx, id)
}
func (r *requests) GetDentries(ctx context.Context, paths []string) ([]store.DentryResult, error) {
	r.n.Add(1)
	return r.Store.GetDentries(ctx, paths)
}
func (r *requests) GetInodes(ctx context.Context, inos []uint64) ([]store.InodeResult, error) {
	r.n.Add(1)
	return r.Store.GetInodes(ctx, inos)
}
func (r *requests) Refresh(ctx context.Context, which store.Searched) error {
	r.n.Add(1)
	return r.Store.Refresh(ctx, which)
}

// TestFileRenameFencedByReaderRunsAgain: a file rename's record and stage
// go in one bulk, whose items Elasticsearch applies independently, so a
// reader can meet the staged path first and fence the operation off
// (create its record ABORTED). The rename then fails with ErrRetry
// (which the mount answers by running it again), having undone its
// stage: the source as it was, no destination.
func TestFileRenameFencedByReaderRunsAgain(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	co := coordinator(t, st, "tree", 10*time.Second)
	src := putDentries(t, st, store.Dentry{Path: "/fenced/a", Parent: "/fenced", Name: "a", Ino: 3131, Type: store.TypeFile})[0]
	txn, err := co.Begin(ctx, co.Strategy.Rename("/fenced/a", "/fenced/b", nil))
	if err != nil {
		t.Fatal(err)
	}
	// What a reader does on meeting an intent whose record is missing.
	fence := store.OpRecord{ID: txn.Op, State: store.OpDone, Aborted: true, Owner: "a-reader", Epoch: 1, SrcType: store.TypeFile}
	if _, err := st.Write(ctx, store.CreateOp(fence)); err != nil {
		t.Fatal(err)
	}
	err = txn.Rename(ctx, locking.RenameSpec{Src: src, Dst: "/fenced/b"})
	if !errors.Is(err, locking.ErrRetry) || errors.Is(err, locking.ErrLeaseLost) {
		t.Fatalf("a rename fenced off by a reader: %v, want ErrRetry", err)
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := st.GetDentry(ctx, "/fenced/a")
	if err != nil || a.Intent.Op != "" || a.Ino != src.Ino {
		t.Errorf("the source after the fenced rename: %+v, %v; want it as it was, no intent", a, err)
	}
	if b, err := st.GetDentry(ctx, "/fenced/b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the destination after the fenced rename: %+v, %v; want none", b, err)
	}
	// Run again, it happens.
	txn, err = co.Begin(ctx, co.Strategy.Rename("/fenced/a", "/fenced/b", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.Rename(ctx, locking.RenameSpec{Src: a, Dst: "/fenced/b"}); err != nil {
		t.Fatal(err)
	}
	co.Journal.WaitFinishing()
	if b, err := st.GetDentry(ctx, "/fenced/b"); err != nil || b.Ino != src.Ino || b.Intent.Op != "" {
		t.Errorf("the destination after the second rename: %+v, %v", b, err)
	}
}

// TestFileRenameRoundTrips: a file rename, locks included, is 5 requests
// whatever the strategy and depth: the locks' bulk (their documents are
// absent, and this mount knows it: see knownDocs), record with stage (one
// bulk), commit with the caller's writes (its answer), then finish, and
// one bulk for DONE + release.
func TestFileRenameRoundTrips(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	for _, strategy := range []string{"tree", "document", "global"} {
		for _, depth := range []int{1, 8} {
			r := &requests{Store: st}
			co := coordinator(t, r, strategy, 10*time.Second)
			dir := deepPath(depth) + "-" + strategy
			src := putDentries(t, st, store.Dentry{Path: dir + "/a", Ino: uint64(1000 + depth), Type: store.TypeFile})[0]
			r.n.Store(0)
			txn, err := co.Begin(ctx, co.Strategy.Rename(dir+"/a", dir+"/b", nil))
			if err != nil {
				t.Fatal(err)
			}
			if err := txn.Rename(ctx, locking.RenameSpec{Src: src, Dst: dir + "/b"}); err != nil {
				t.Fatal(err)
			}
			co.Journal.WaitFinishing() // a file's finish runs in the background
			if err := txn.End(ctx); err != nil {
				t.Fatal(err)
			}
			if n := r.n.Load(); n != 5 {
				t.Errorf("%s depth %d: a file rename took %d requests, want 5", strategy, depth, n)
			} else {
				t.Logf("%s depth %d: %d requests", strategy, depth, n)
			}
		}
	}
}

// TestTakeoverResumed: an operation this mount took over but could not
// finish undoing then (here: set up as if its rollback had stopped
// halfway) is resumed by its sweeper, since no other mount touches the
// record of a live owner.
func TestTakeoverResumed(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	co := coordinator(t, st, "tree", 2*time.Second)
	const op = "deadbeefdeadbeef-7"
	lock := locking.PathLock("/p", store.Exclusive)
	if _, err := st.Write(ctx, store.CreateOp(store.OpRecord{ID: op, State: store.OpAborted, Owner: co.Session().ID(), Epoch: 2,
		Src: "/q", Dst: "/p/x", SrcIno: 99, SrcType: store.TypeFile,
		Locks: []store.LockRef{{ID: lock.ID, Path: lock.Path, Mode: lock.Mode}}})); err != nil {
		t.Fatal(err)
	}
	putDentries(t, st, store.Dentry{Path: "/p/x", Ino: 99, Type: store.TypeFile, Intent: store.Intent{Op: op, Role: store.RoleDst}})
	if _, err := st.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: store.LockDoc{ID: lock.ID, Path: lock.Path,
		Holders: []store.Holder{{Session: "deadbeefdeadbeef", Op: op, Mode: store.Exclusive}}}}})); err != nil {
		t.Fatal(err)
	}
	if err := co.Sweep(ctx, map[string]time.Duration{}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetOp(ctx, op)
	if err != nil || rec.State != store.OpDone || !rec.Aborted {
		t.Errorf("the taken-over operation after a sweep: %+v %v; want DONE, aborted", rec, err)
	}
	res, err := st.GetDentries(ctx, []string{"/p/x"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, store.ErrNotFound) {
		t.Errorf("the rolled-back destination is still there: %+v %v", res[0].Dentry, res[0].Err)
	}
	docs, err := st.GetLocks(ctx, []string{lock.ID})
	if err != nil {
		t.Fatal(err)
	}
	if docs[0].Found {
		t.Errorf("the operation's lock entry survived: %+v", docs[0])
	}
}

// TestRenameOverDropsReplacedLink: a session nobody gave a link drop of
// its own (an admin command's) drops the link of the inode a rename
// replaced: with its last link the inode goes, with another left it stays,
// one link less.
func TestRenameOverDropsReplacedLink(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	co := coordinator(t, st, "tree", 10*time.Second)
	for i, c := range []struct {
		name  string
		nlink uint32
	}{{"last", 1}, {"linked", 2}} {
		replaced := uint64(7100 + i)
		if _, err := st.Write(ctx, store.CreateInode(store.Inode{Ino: replaced, Type: store.TypeFile, Nlink: c.nlink, Mode: 0o644})); err != nil {
			t.Fatal(err)
		}
		src, dst := "/"+c.name+"-src", "/"+c.name+"-dst"
		ds := putDentries(t, st,
			store.Dentry{Path: src, Parent: "/", Name: c.name + "-src", Ino: uint64(7200 + i), Type: store.TypeFile},
			store.Dentry{Path: dst, Parent: "/", Name: c.name + "-dst", Ino: replaced, Type: store.TypeFile})
		txn, err := co.Begin(ctx, co.Strategy.Rename(src, dst, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := txn.Rename(ctx, locking.RenameSpec{Src: ds[0], Dst: dst, Target: &ds[1]}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		co.Journal.WaitFinishing() // a file's finish runs in the background
		if err := txn.End(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := st.GetInode(ctx, replaced)
		switch {
		case c.nlink == 1 && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s: the replaced inode lost its last link and is still there: %+v %v", c.name, n, err)
		case c.nlink > 1 && (err != nil || n.Nlink != c.nlink-1):
			t.Errorf("%s: the replaced inode has %d links (%v), want %d", c.name, n.Nlink, err, c.nlink-1)
		}
	}
}

// TestRenameMovesParents: a file renamed to another directory has that
// directory recorded in its inode (store.Inode.Parents) by the time the
// rename returns, in the requests a rename makes anyway when the caller
// knows the inode at its version, with a read and a compare-and-set of
// its own when it does not; a file with two links has the moved one's
// directory replaced only. An owner that cannot vouch for its session
// writes nothing: whoever took its rename over moves them.
func TestRenameMovesParents(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	r := &requests{Store: st}
	// A long lease: no renewal among the requests counted.
	co := coordinator(t, r, "tree", 10*time.Second)
	const s, d, other = 7501, 7502, 7503
	rename := func(ino uint64, src, dst string, from, to uint64, known bool) int64 {
		t.Helper()
		sd, err := st.GetDentry(ctx, src)
		if errors.Is(err, store.ErrNotFound) {
			sd = putDentries(t, st, store.Dentry{Path: src, Ino: ino, Type: store.TypeFile})[0]
		} else if err != nil {
			t.Fatal(err)
		}
		spec := locking.RenameSpec{Src: sd, Dst: dst, SrcParent: from, DstParent: to}
		if known {
			a, err := st.GetInode(ctx, ino)
			if err != nil {
				t.Fatal(err)
			}
			spec.SrcAttr = &a
		}
		r.n.Store(0)
		txn, err := co.Begin(ctx, co.Strategy.Rename(src, dst, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := txn.Rename(ctx, spec); err != nil {
			t.Fatal(err)
		}
		co.Journal.WaitFinishing() // a file's finish runs in the background
		if err := txn.End(ctx); err != nil {
			t.Fatal(err)
		}
		return r.n.Load()
	}
	parents := func(ino uint64) []uint64 {
		t.Helper()
		a, err := st.GetInode(ctx, ino)
		if err != nil {
			t.Fatal(err)
		}
		return a.Parents
	}
	one := store.Inode{Ino: 7600, Type: store.TypeFile, Mode: 0o644, Nlink: 1, Parents: []uint64{s}}
	two := store.Inode{Ino: 7601, Type: store.TypeFile, Mode: 0o644, Nlink: 2, Parents: []uint64{s, other}}
	for _, a := range []store.Inode{one, two} {
		if _, err := st.Write(ctx, store.CreateInode(a)); err != nil {
			t.Fatal(err)
		}
	}
	if n := rename(one.Ino, "/ps/a", "/pd/a", s, d, true); n != 5 {
		t.Errorf("a file rename to another directory, the inode known: %d requests, want 5", n)
	}
	if got := parents(one.Ino); !slices.Equal(got, []uint64{d}) {
		t.Errorf("renamed to %d: parents %v", d, got)
	}
	if n := rename(one.Ino, "/pd/a", "/ps/a", d, s, false); n != 7 {
		t.Errorf("a file rename to another directory, the inode not known: %d requests, want 7 (a read and a write more)", n)
	}
	if got := parents(one.Ino); !slices.Equal(got, []uint64{s}) {
		t.Errorf("renamed back to %d: parents %v", s, got)
	}
	rename(two.Ino, "/ps/b", "/pd/b", s, d, true)
	if got := parents(two.Ino); !slices.Equal(got, []uint64{d, other}) {
		t.Errorf("one of two links renamed to %d: parents %v, want [%d %d]", d, got, d, other)
	}

	sess := coordinator(t, st, "tree", time.Second).Session()
	sess.Freeze()
	defer sess.Thaw()
	deadline := time.Now().Add(time.Minute)
	for sess.Check() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	missed := co.Journal.MoveParents(ctx, sess, "fenced-op", []store.ParentMove{{Ino: one.Ino, From: s, To: d}})
	if sess.Check() == nil {
		t.Fatal("the frozen session could still vouch for itself")
	}
	if !slices.Equal(missed, []uint64{one.Ino}) {
		t.Errorf("a move by an owner whose lease lapsed reports %v missed, want [%d]", missed, one.Ino)
	}
	if got := parents(one.Ino); !slices.Equal(got, []uint64{s}) {
		t.Errorf("an owner whose lease lapsed moved the parents: %v", got)
	}
}
