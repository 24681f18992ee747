package test

// Hostile and damaged documents, as the mount meets them: every mount's
// credentials may write any document into the filesystem's indices, and
// a bad write or damage may leave anything there. A document that breaks
// the model answers EIO for the paths it touches, logged with its id,
// and never makes a mount loop, grow without bound, crash or hang; the
// rest of the tree keeps working.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// hostileLimit bounds each command run against a mount holding a hostile
// document: far past what it takes on a loaded machine, so that reaching
// it means the mount hangs or loops.
const hostileLimit = 90 * time.Second

// hostileMemory is what a mount's resident memory may reach before the
// test kills it: several times a race-built daemon's, far below what a
// loop that allocates takes within the commands' limit.
const hostileMemory = 1 << 30

// runBounded runs a program against a mount, killed after hostileLimit;
// it fails the test if it had to be killed.
func runBounded(t *testing.T, dir, name string, args ...string) mounttest.Result {
	t.Helper()
	r := mounttest.WaitResult(t, name+" "+strings.Join(args, " "),
		mounttest.Background(func() mounttest.Result { return mounttest.Exec(hostileLimit, dir, name, args...) }),
		hostileLimit+time.Minute)
	if r.Took >= hostileLimit {
		t.Fatalf("%s %s did not end within %s (killed): %s", name, args, hostileLimit, r.Out)
	}
	return r
}

// wantEIO checks that a command failed, saying "Input/output error".
func wantEIO(t *testing.T, r mounttest.Result, what string) {
	t.Helper()
	if r.Code == 0 || !strings.Contains(r.Out, "Input/output error") {
		t.Errorf("%s: exit %d, %q; want an Input/output error", what, r.Code, r.Out)
	}
}

// wantOK checks that a command succeeded and printed each of want.
func wantOK(t *testing.T, r mounttest.Result, what string, want ...string) {
	t.Helper()
	if r.Code != 0 {
		t.Errorf("%s: exit %d: %s", what, r.Code, r.Out)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.Out, w) {
			t.Errorf("%s: %q lacks %q", what, r.Out, w)
		}
	}
}

// checkMemory fails the test if a mount's memory passed hostileMemory.
func checkMemory(t *testing.T, w *mounttest.MemWatch, m *mounttest.Mount) {
	t.Helper()
	if peak, killed := w.Peak(); killed {
		t.Fatalf("mount at %s passed %d MiB of memory (killed)", m.Dir, peak>>20)
	} else {
		t.Logf("mount at %s: peak resident memory %d MiB", m.Dir, peak>>20)
	}
}

// wantLoggedOnce checks that one line of m's log names the document id.
func wantLoggedOnce(t *testing.T, m *mounttest.Mount, id string) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(m.Log(), "\n") {
		if strings.Contains(l, id) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d lines of the log of the mount at %s name the document %s, want one:\n%s", n, m.Dir, id, m.Log())
	}
}

// TestHostileRootAlias: a path document naming the root's inode as a
// directory of the root (a directory alias, which a bad write may leave)
// answers EIO for that name, to ls, stat and a lookup below it, within
// the commands' limit, on this mount and on one mounted after; the rest
// of the tree lists and reads, memory stays small, and the log names the
// document once.
func TestHostileRootAlias(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	runBounded(t, m0.Dir, "sh", "-c", "mkdir -p a/b && echo fine > a/b/file && echo top > top")
	m0.Unmount(t)

	id := store.DocID("/loop")
	putRaw(t, f.URL, f.Index, id, map[string]any{"path": "/loop", "parent": "/", "name": "loop", "ino": 1, "type": "dir"})

	check := func(m *mounttest.Mount, mw *mounttest.MemWatch) {
		t.Helper()
		r := runBounded(t, m.Dir, "ls", "-la", ".")
		if !strings.Contains(r.Out, "a") || !strings.Contains(r.Out, "top") {
			t.Errorf("ls -la of the root: exit %d, %q; want a and top listed", r.Code, r.Out)
		}
		wantEIO(t, runBounded(t, m.Dir, "stat", "loop"), "stat loop")
		wantEIO(t, runBounded(t, m.Dir, "ls", "loop"), "ls loop")
		wantEIO(t, runBounded(t, m.Dir, "stat", "loop/a"), "stat loop/a")
		wantEIO(t, runBounded(t, m.Dir, "ls", "loop/loop/a"), "ls loop/loop/a")
		wantOK(t, runBounded(t, m.Dir, "cat", "a/b/file", "top"), "cat", "fine", "top")
		wantOK(t, runBounded(t, m.Dir, "find", "."), "find", "./a/b/file", "./top")
		wantOK(t, runBounded(t, m.Dir, "sh", "-c", "echo more > a/more && cat a/more"), "write", "more")
		checkMemory(t, mw, m)
	}
	m := f.Mount(t)
	mw := m.WatchMemory(t, hostileMemory)
	check(m, mw)
	m2 := f.Mount(t)
	check(m2, m2.WatchMemory(t, hostileMemory))
	check(m, mw) // again: answered the same, and not logged again

	for _, mm := range []*mounttest.Mount{m, m2} {
		wantLoggedOnce(t, mm, id)
	}
}

// TestHostileDirAlias: a path document naming, as a directory's entry,
// the inode of a directory above it (a second name of a directory inside
// itself) answers EIO for that name, to stat, ls and a lookup below it;
// the rest of the directory and the tree list and read, memory stays
// small, and the log names the document once.
func TestHostileDirAlias(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	runBounded(t, m0.Dir, "sh", "-c", "mkdir -p a/b/c && echo fine > a/b/c/file")
	fi, err := os.Stat(m0.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	m0.Unmount(t)

	id := store.DocID("/a/b/up")
	putRaw(t, f.URL, f.Index, id, map[string]any{"path": "/a/b/up", "parent": "/a/b", "name": "up", "ino": ino, "type": "dir"})

	check := func(m *mounttest.Mount, mw *mounttest.MemWatch) {
		t.Helper()
		r := runBounded(t, m.Dir, "ls", "-la", "a/b")
		if !strings.Contains(r.Out, "c") {
			t.Errorf("ls -la a/b: exit %d, %q; want c listed", r.Code, r.Out)
		}
		wantEIO(t, runBounded(t, m.Dir, "stat", "a/b/up"), "stat a/b/up")
		wantEIO(t, runBounded(t, m.Dir, "ls", "a/b/up"), "ls a/b/up")
		wantEIO(t, runBounded(t, m.Dir, "stat", "a/b/up/b/c/file"), "stat a/b/up/b/c/file")
		wantOK(t, runBounded(t, m.Dir, "cat", "a/b/c/file"), "cat", "fine")
		wantOK(t, runBounded(t, m.Dir, "sh", "-c", "echo more > a/b/more && cat a/b/more && ls a"), "write", "more", "b")
		checkMemory(t, mw, m)
	}
	m := f.Mount(t)
	mw := m.WatchMemory(t, hostileMemory)
	check(m, mw)
	m2 := f.Mount(t)
	check(m2, m2.WatchMemory(t, hostileMemory))
	check(m, mw)

	for _, mm := range []*mounttest.Mount{m, m2} {
		wantLoggedOnce(t, mm, id)
	}
}

// TestHostileDamagedDocuments: damaged documents of each kind a mount
// reads — path documents of the wrong types or inconsistent, inode
// documents with numbers out of range or link lists past any count,
// chunks with bad base64, longer than a chunk or naming another chunk,
// lock, operation, delegation and session documents of the wrong shape —
// answer EIO for the paths they touch (each logged once with its id), or
// are skipped; the mount neither crashes nor hangs nor grows, and the
// rest of the tree keeps working on two mounts.
func TestHostileDamagedDocuments(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	runBounded(t, m0.Dir, "sh", "-c", `mkdir -p good dir && echo fine > good/file &&
		for n in size nlink mode parents ino chunk64 chunklong chunkother; do echo data-$n > $n; done &&
		echo locked > locked && echo flocked > flocked && mkdir deleg && echo in > deleg/file`)
	inos := map[string]uint64{}
	for _, name := range []string{"size", "nlink", "mode", "parents", "ino", "chunk64", "chunklong", "chunkother", "deleg", "flocked"} {
		fi, err := os.Stat(m0.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		inos[name] = fi.Sys().(*syscall.Stat_t).Ino
	}
	m0.Unmount(t)

	paths, inodes, data, locks, sessions := f.Index, f.Index+"-inodes", f.Index+"-data", f.Index+"-locks", f.Index+"-sessions"
	eio := map[string]string{} // name below the mount: the id of the damaged document it reads
	put := func(index, id string, doc any, name string) {
		body, _ := json.Marshal(doc)
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/%s/_doc/%s?refresh=true", f.URL, index, id), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode == 400 && strings.Contains(string(answer), "parsing"):
			// The index's mapping refuses it: no mount can meet it.
			t.Logf("%s/%s refused by the mapping: %s", index, id, answer)
		case res.StatusCode/100 != 2:
			t.Fatalf("raw put %s/%s: %s: %s", index, id, res.Status, answer)
		case name != "":
			eio[name] = id
		}
	}
	// Path documents.
	put(paths, store.DocID("/types"), map[string]any{"path": "/types", "parent": "/", "name": "types", "ino": "123", "type": 7}, "types")
	put(paths, store.DocID("/missing"), map[string]any{"path": "/missing"}, "missing")
	put(paths, store.DocID("/negative"), map[string]any{"path": "/negative", "parent": "/", "name": "negative", "ino": -5, "type": "file"}, "negative")
	put(paths, store.DocID("/huge"), map[string]any{"path": "/huge", "parent": "/", "name": "huge", "ino": uint64(1<<64 - 1), "type": "file"}, "huge")
	put(paths, store.DocID("/elsewhere"), map[string]any{"path": "/dir/x", "parent": "/dir", "name": "x", "ino": inos["size"], "type": "file"}, "elsewhere")
	// Inode documents.
	inode := func(name string, change map[string]any) {
		doc := map[string]any{"ino": inos[name], "type": "file", "mode": 0o644, "size": 10, "nlink": 1, "chunks": 1}
		for k, v := range change {
			doc[k] = v
		}
		put(inodes, strconv.FormatUint(inos[name], 10), doc, name)
	}
	inode("size", map[string]any{"size": -1})
	inode("nlink", map[string]any{"nlink": 1 << 40})
	inode("mode", map[string]any{"mode": "rw-r--r--"})
	parents := make([]uint64, 100000)
	for i := range parents {
		parents[i] = 1
	}
	inode("parents", map[string]any{"parents": parents})
	inode("ino", map[string]any{"ino": inos["size"]})
	// Chunk documents.
	chunk := func(name string, doc map[string]any) {
		put(data, fmt.Sprintf("%d.0", inos[name]), doc, name)
	}
	chunk("chunk64", map[string]any{"ino": inos["chunk64"], "chunk": 0, "data": "!!not base64!!"})
	chunk("chunklong", map[string]any{"ino": inos["chunklong"], "chunk": 0, "text": strings.Repeat("x", 3<<20)})
	chunk("chunkother", map[string]any{"ino": inos["chunkother"], "chunk": -7, "data": "AAAA"})
	// Lock, operation, delegation and session documents: skipped or EIO
	// for what they touch, the mount lives on.
	put(locks, store.LockID("/locked"), map[string]any{"kind": "lock", "path": "/locked", "holders": "everyone", "waiters": 12}, "")
	put(locks, "Ogarbage", map[string]any{"kind": "op", "op": "garbage", "state": "banana", "epoch": "soon", "body": []int{1, 2}}, "")
	// An operation of a dead mount whose only path document is damaged:
	// its recovery fails, and is tried again at each sweep, not in a loop.
	put(paths, store.DocID("/stuck"), map[string]any{"path": "/stuck", "parent": "/", "name": "stuck", "ino": inos["size"], "type": "file", "op": "stuck", "role": "ovr"}, "stuck")
	put(locks, "Ostuck", map[string]any{"kind": "op", "op": "stuck", "state": "committed", "owner": "nobody", "epoch": 1, "body": map[string]any{"src": "/stuck", "dst": "/stuck2", "src_type": "file"}}, "")
	put(locks, "Ohalf", map[string]any{"kind": "op", "op": "half", "state": "committed", "owner": "nobody", "body": map[string]any{"src": "/good/file", "dst": "/good/file", "src_type": "file"}}, "")
	// A directory's delegation document says who may write it in memory:
	// damaged, what is in the directory is not known.
	put(locks, store.DelegLockID(inos["deleg"]), map[string]any{"kind": "lock", "path": 3, "holders": []any{map[string]any{"s": 5, "m": []int{1}}}}, "deleg/file")
	put(locks, store.FileLockID(inos["flocked"]), map[string]any{"kind": "lock", "path": "/flocked", "holders": []any{map[string]any{"s": "x", "m": "x", "a": -5, "z": -9}}, "waiters": "none"}, "")
	put(sessions, "numbered", map[string]any{"session": 5, "counter": 1, "lease": 1000}, "")
	put(sessions, "garbage", map[string]any{"session": "garbage", "counter": "x", "lease": -1}, "")
	put(sessions, "neverending", map[string]any{"session": "neverending", "counter": 1, "lease": uint64(1<<63 - 1), "started": -1}, "")

	check := func(m *mounttest.Mount, mw *mounttest.MemWatch) {
		t.Helper()
		for name := range eio {
			wantEIO(t, runBounded(t, m.Dir, "cat", name), "cat "+name)
		}
		runBounded(t, m.Dir, "ls", "-la", ".")
		// A damaged lock document fails what takes that lock alone.
		wantEIO(t, runBounded(t, m.Dir, "mv", "locked", "locked2"), "mv locked")
		wantEIO(t, runBounded(t, m.Dir, "flock", "-n", "flocked", "true"), "flock flocked")
		wantOK(t, runBounded(t, m.Dir, "cat", "flocked"), "cat flocked", "flocked")
		wantOK(t, runBounded(t, m.Dir, "cat", "good/file"), "cat", "fine")
		wantOK(t, runBounded(t, m.Dir, "sh", "-c", "echo new > good/new && mv good/new dir/new && cat dir/new && ls good dir"), "write", "new", "file")
		checkMemory(t, mw, m)
	}
	m := f.Mount(t)
	mw := m.WatchMemory(t, hostileMemory)
	check(m, mw)
	m2 := f.Mount(t, "--delegations")
	check(m2, m2.WatchMemory(t, hostileMemory))
	check(m, mw)
	mounttest.Alive(t, m)
	mounttest.Alive(t, m2)
	for _, mm := range []*mounttest.Mount{m, m2} {
		n := 0
		for _, l := range strings.Split(mm.Log(), "\n") {
			if strings.Contains(l, "stuck") {
				n++
			}
		}
		t.Logf("the mount at %s logged %d lines of the stuck operation", mm.Dir, n)
		if n > 100 {
			t.Errorf("the mount at %s logged %d lines of the stuck operation: its recovery spins", mm.Dir, n)
		}
	}
	eio["mv locked"] = store.LockID("/locked")
	eio["flock flocked"] = store.FileLockID(inos["flocked"])
	for _, mm := range []*mounttest.Mount{m, m2} {
		for name, id := range eio {
			if !strings.Contains(mm.Log(), id) {
				t.Errorf("the log of the mount at %s does not name the document %s (%s)", mm.Dir, id, name)
			}
		}
	}
}

// TestHostileBatchMeetsDamagedName: a write-delegated directory whose
// pending batch renames a stored file, whose path document is then found
// damaged (it names the root's inode). Retrying cannot mend it: the
// batch leaves that change out and lands the rest, gives the delegation
// back, and logs the document once; the other mount's calls into the
// directory answer within the lock timeout (not EAGAIN after it, while
// the flush retried for ever and kept the delegation); the writer, whose
// file's rename was only half done, is told EIO at fsync.
func TestHostileBatchMeetsDamagedName(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	m1 := f.Mount(t)
	// Everything the rename needs held in memory (the names and the
	// attributes: see renameStored), so that it is made there.
	mounttest.Sh(t, m0.Dir, "mkdir w && echo stored > w/f && echo other > w/other && sync w/f && ls -la w && ! stat w/g 2>/dev/null")
	fh, err := os.OpenFile(m0.Path("w/f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write([]byte("more\n")); err != nil {
		t.Fatal(err)
	}
	id := store.DocID("/w/f")
	h := &hostile{t: t, f: f}
	h.put(f.Index, id, map[string]any{"path": "/w/f", "parent": "/w", "name": "f", "ino": store.RootIno, "type": "file"})
	// In memory, under the delegation m0 holds since it made w, with
	// another change for the batch to land.
	if err := hostileCall(func() error { return os.Rename(m0.Path("w/f"), m0.Path("w/g")) }); err != nil {
		t.Fatal(err)
	}
	if err := hostileCall(func() error { return os.WriteFile(m0.Path("w/new"), []byte("new\n"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w/g", "w/new", "w/other"} {
		start := time.Now()
		var got []byte
		err := hostileCall(func() (err error) { got, err = os.ReadFile(m1.Path(name)); return err })
		took := time.Since(start)
		t.Logf("cat %s on the other mount: %q, %v after %v", name, got, err, took.Round(time.Millisecond))
		if err != nil || took >= 30*time.Second {
			t.Errorf("cat %s on the other mount: %v after %v; want its contents within the lock timeout", name, err, took.Round(time.Millisecond))
		}
	}
	if err := hostileCall(func() error { _, err := os.Lstat(m1.Path("w/f")); return err }); !errors.Is(err, syscall.EIO) {
		t.Errorf("stat w/f (damaged) on the other mount: %v, want EIO", err)
	}
	// No process is started before this fsync: a child closing the
	// description it inherited (at exec) would be told, and not this fsync.
	if err := hostileCall(fh.Sync); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync of the renamed file's description: %v, want EIO", err)
	}
	if err := hostileCall(fh.Sync); err != nil {
		t.Errorf("a second fsync: %v, want nothing (told once)", err)
	}
	wantOK(t, runBounded(t, m0.Dir, "cat", "w/g", "w/new"), "cat on the writing mount", "stored", "more", "new")
	mounttest.Alive(t, m0)
	mounttest.Alive(t, m1)
	wantLoggedOnce(t, m0, id)
	if n := strings.Count(m0.Log(), "flushing the pending batch failed"); n > 0 {
		t.Errorf("the writing mount logged %d failed flushes:\n%s", n, m0.Log())
	}
}

// The fuzz of hostile documents: what no esfs writes (damage, a buggy or malicious
// client with write access to the indices) must cost an error on what it
// touches, never a mount, and esfs fsck --repair must settle it.

// hostileCallLimit bounds every call on a mount: its requests' timeout
// (the default --es-timeout, 15 s) plus slack for a busy machine. A call
// that takes longer hangs.
const hostileCallLimit = 15*time.Second + 45*time.Second

// TestHostileDocuments writes random and mutated path, inode, chunk, lock
// and journal documents straight into the indices of a filesystem mounted
// twice (wrong JSON types, entries naming the root's inode or an
// ancestor's, negative and huge numbers, bad base64, missing fields, paths
// that are not their parent and name, documents at another path's id,
// intents of operations that never were), runs listings, lookups, stats,
// reads and renames over them on both mounts, each bounded by
// hostileCallLimit, and checks after every round that both mounts are up
// and that an untouched subtree (control) lists and reads as written on
// both. At the end esfs fsck --repair, then esfs fsck twice, must find the
// filesystem clean (a repair undone by the next run is a bug), and
// control still reads the same.
//
// The suite runs a fixed seed, so that a failure is the code's, never the
// draw's (as TestCampaign's seeds are fixed): ESFS_HOSTILE_NEW_SEED=1
// draws one, ESFS_HOSTILE_SEED replays one (the seed is printed on
// failure); ESFS_HOSTILE_ROUNDS runs more rounds (default 3).
func TestHostileDocuments(t *testing.T) {
	seed := int64(7)
	if os.Getenv("ESFS_HOSTILE_NEW_SEED") == "1" {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	if s := os.Getenv("ESFS_HOSTILE_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("ESFS_HOSTILE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	rounds := mounttest.EnvInt(t, "ESFS_HOSTILE_ROUNDS", 3)
	t.Logf("seed %d, %d rounds (replay: ESFS_HOSTILE_SEED=%d)", seed, rounds, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: replay with ESFS_HOSTILE_SEED=%d ESFS_HOSTILE_ROUNDS=%d", seed, seed, rounds)
		}
	})
	rng := rand.New(rand.NewSource(seed))

	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := mounttest.MountUncached(t, f, nil)
	mounts := []*mounttest.Mount{a, b}
	control := map[string]string{"control/a": "alpha\n", "control/sub/b": "beta\n", "control/sub/deeper/c": strings.Repeat("gamma", 1000)}
	mounttest.Sh(t, a.Dir, `mkdir -p control/sub/deeper w/d0/d1/d2 w/e && echo f0 > w/f0 && echo f1 > w/d0/f1 && echo f2 > w/d0/d1/f2 && ln w/f0 w/e/link && ln -s ../f0 w/e/sym && head -c 3000000 /dev/zero > w/big && sync`)

	for rel, data := range control {
		if err := os.WriteFile(a.Path(rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a.Sync(t)
	h := &hostile{t: t, f: f, rng: rng}
	h.learn(context.Background())
	checkControl := func(when string) {
		t.Helper()
		for _, m := range mounts {
			if m.Exited() {
				t.Fatalf("%s: the mount at %s died:\n%s", when, m.Dir, m.Log())
			}
			if err := hostileCall(func() error { _, err := os.ReadDir(m.Dir); return err }); err != nil {
				t.Fatalf("%s: the mount at %s no longer answers: %v", when, m.Dir, err)
			}
			for rel, want := range control {
				var got []byte
				err := hostileCall(func() (err error) { got, err = os.ReadFile(m.Path(rel)); return err })
				if err != nil || string(got) != want {
					t.Fatalf("%s: %s on %s: %d bytes, %v; want %d bytes", when, rel, m.Dir, len(got), err, len(want))
				}
			}
			for dir, want := range map[string]string{"control": "a sub", "control/sub": "b deeper", "control/sub/deeper": "c"} {
				var names []string
				err := hostileCall(func() error {
					es, err := os.ReadDir(m.Path(dir))
					for _, e := range es {
						names = append(names, e.Name())
					}
					return err
				})
				if err != nil || strings.Join(names, " ") != want {
					t.Fatalf("%s: listing %s on %s: %q, %v; want %q", when, dir, m.Dir, names, err, want)
				}
			}
		}
	}
	checkControl("before")

	for round := 0; round < rounds; round++ {
		for i := 0; i < 8; i++ {
			h.write()
		}
		mounttest.ESRequest(t, f.URL, "POST", "/"+f.Index+","+f.Index+"-*/_refresh", "")
		for _, m := range mounts {
			h.exercise(m, round)
		}
		checkControl(fmt.Sprintf("round %d", round))
	}
	t.Logf("documents: %d written, %d refused by Elasticsearch", h.written, h.refused)

	out, code := fsckRun(t, f, "--repair")
	t.Logf("esfs fsck --repair:\n%s", out)
	if code != 0 && code != 1 {
		t.Errorf("esfs fsck --repair: exit status %d, want 0 or 1 (everything repaired)", code)
	}
	for i := 1; i <= 2; i++ {
		if out, code := fsckRun(t, f); code != 0 {
			t.Errorf("esfs fsck %d after the repair: exit status %d, want 0 (clean)\n%s", i, code, out)
		}
	}
	checkControl("after fsck --repair")
	for _, m := range mounts {
		h.walk(m, "after fsck --repair")
	}
}

// hostileRoundLimit bounds the calls of one round on one mount: each
// answers within hostileCallLimit, but calls that each wait their whole
// lock timeout (a lock held by an operation that never ends) are a
// finding too, and would make the test run for an hour.
const hostileRoundLimit = 3 * time.Minute

// hostileCall runs fn, failing if it does not return within
// hostileCallLimit (it is then left running: the mount hangs).
func hostileCall(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hostileCallLimit):
		return errHung
	}
}

var errHung = fmt.Errorf("no answer within %v", hostileCallLimit)

// hostile writes the documents and runs the calls of one test.
type hostile struct {
	t                *testing.T
	f                *mounttest.FS
	rng              *rand.Rand
	paths            []string          // below /w, known or written
	inos             map[string]uint64 // what the tree held at the start
	written, refused int
	roundStart       time.Time // of the calls of the round on a mount
}

// learn reads the inodes of the tree below /w.
func (h *hostile) learn(ctx context.Context) {
	h.inos = map[string]uint64{"/": store.RootIno}
	for _, p := range []string{"/w", "/w/d0", "/w/d0/d1", "/w/d0/d1/d2", "/w/e", "/w/f0", "/w/d0/f1", "/w/d0/d1/f2", "/w/e/link", "/w/e/sym", "/w/big", "/control"} {
		d, err := h.f.Store.GetDentry(ctx, p)
		if err != nil {
			h.t.Fatal(err)
		}
		h.inos[p] = d.Ino
		if p != "/control" {
			h.paths = append(h.paths, p)
		}
	}
}

// anyPath is a path below /w: known, or new.
func (h *hostile) anyPath() string {
	if h.rng.Intn(3) > 0 {
		return h.paths[h.rng.Intn(len(h.paths))]
	}
	dir := h.paths[h.rng.Intn(len(h.paths))]
	return dir + "/" + []string{"loop", "up", "x", "y", "new", "ghost", "..", "a b"}[h.rng.Intn(8)]
}

// anyIno is an inode number: of the root, of an ancestor of p, of some
// other path, none, or absurd.
func (h *hostile) anyIno(p string) any {
	switch h.rng.Intn(9) {
	case 0, 1:
		return store.RootIno
	case 2, 3:
		for dir := p; dir != "/"; {
			dir, _ = store.Split(dir)
			if ino, ok := h.inos[dir]; ok && h.rng.Intn(2) == 0 {
				return ino
			}
		}
		return h.inos["/w"]
	case 4:
		var ks []string
		for k := range h.inos {
			ks = append(ks, k)
		}
		return h.inos[ks[h.rng.Intn(len(ks))]]
	case 5:
		return 7_000_000_000 + h.rng.Int63n(1000) // no such inode
	case 6:
		return []any{-1, 0, math.MaxInt64, "12", "abc", 1.5, true, nil, []int{1}}[h.rng.Intn(9)]
	default:
		return h.inos["/w/d0"]
	}
}

func (h *hostile) anyType() any {
	return []any{"dir", "dir", "file", "file", "symlink", "fifo", "bogus", 3, nil}[h.rng.Intn(9)]
}

// write writes one hostile document.
func (h *hostile) write() {
	switch h.rng.Intn(10) {
	case 0, 1, 2, 3:
		h.pathDoc()
	case 4, 5:
		h.inodeDoc()
	case 6:
		h.chunkDoc()
	case 7:
		h.lockDoc()
	default:
		h.opDoc()
	}
}

func (h *hostile) pathDoc() {
	p := h.anyPath()
	dir, name := store.Split(p)
	doc := map[string]any{"path": p, "parent": dir, "name": name, "ino": h.anyIno(p), "type": h.anyType()}
	id := store.DocID(p)
	switch h.rng.Intn(8) {
	case 0: // not its parent and name
		doc["parent"] = h.anyPath()
	case 1: // a cycle of parents
		doc["parent"] = p + "/x"
	case 2: // at another path's id
		id = store.DocID(h.anyPath())
	case 3: // missing fields
		for _, k := range []string{"path", "parent", "name", "ino", "type"} {
			if h.rng.Intn(3) == 0 {
				delete(doc, k)
			}
		}
	case 4: // the intent of an operation that never was
		doc["op"] = fmt.Sprintf("ghost%d", h.rng.Intn(5))
		doc["role"] = []any{"src", "dst", "ovr", "bogus", 7}[h.rng.Intn(5)]
	case 5: // a text that does not decode
		doc["path"] = p + "\x00"
	}
	h.put(h.f.Index, id, doc)
	if _, known := h.inos[p]; !known && p != "/w/.." {
		h.paths = append(h.paths, p)
	}
}

func (h *hostile) inodeDoc() {
	p := h.paths[h.rng.Intn(len(h.paths))]
	ino, ok := h.inos[p]
	if !ok || h.rng.Intn(4) == 0 {
		ino = 7_000_000_000 + uint64(h.rng.Int63n(1000))
	}
	now := time.Now().UnixNano()
	doc := map[string]any{"ino": ino, "type": h.anyType(), "mode": 0o755, "uid": 0, "gid": 0, "size": 10, "nlink": 1,
		"atime": now, "mtime": now, "ctime": now, "btime": now}
	for k, v := range map[string][]any{
		"size":    {-1, int64(math.MaxInt64), 1 << 40, "big"},
		"nlink":   {-5, 0, 1 << 31, 100},
		"mode":    {-1, "rwx", 0o7777, 1 << 20},
		"xattrs":  {map[string]any{"user.x": "!!!not base64"}, "x", map[string]any{"user.y": 5}},
		"parents": {[]any{-1}, "p", []any{store.RootIno, 99}},
		"chunks":  {-7, 1 << 50},
		"target":  {5, strings.Repeat("t", 5000)},
		"ino":     {"x", -3, 0},
	} {
		if h.rng.Intn(5) == 0 {
			doc[k] = v[h.rng.Intn(len(v))]
		}
	}
	if h.rng.Intn(6) == 0 {
		delete(doc, []string{"type", "ino", "mode", "nlink", "size"}[h.rng.Intn(5)])
	}
	h.put(h.f.Index+"-inodes", strconv.FormatUint(ino, 10), doc)
}

func (h *hostile) chunkDoc() {
	ino := h.inos[[]string{"/w/f0", "/w/big", "/w/d0/f1", "/w/d0"}[h.rng.Intn(4)]]
	chunk := []int64{0, 1, 2, -1, 1 << 40}[h.rng.Intn(5)]
	data := []any{"aGVsbG8=", "!!!bad base64!!!", 5, "", strings.Repeat("QUFB", 1<<16)}[h.rng.Intn(5)]
	doc := map[string]any{"ino": ino, "chunk": chunk, "data": data, "sess": "ghost"}
	if h.rng.Intn(4) == 0 {
		delete(doc, []string{"ino", "chunk", "data"}[h.rng.Intn(3)])
	}
	h.put(h.f.Index+"-data", fmt.Sprintf("%d.%d", ino, chunk), doc)
}

func (h *hostile) lockDoc() {
	p := h.paths[h.rng.Intn(len(h.paths))]
	holder := map[string]any{"s": "ghost-session", "o": "ghost-op", "m": []any{"X", "S", "C", "?", 5}[h.rng.Intn(5)], "t": time.Now().UnixNano()}
	doc := map[string]any{"kind": "lock", "path": p, "holders": []any{holder}}
	switch h.rng.Intn(4) {
	case 0:
		doc["holders"] = "nobody"
	case 1:
		doc["waiters"] = []any{map[string]any{"s": 5, "k": nil}}
	}
	id := store.LockID(p)
	if ino, ok := h.inos[p]; ok && h.rng.Intn(2) == 0 {
		id = []string{store.DelegLockID(ino), store.FileLockID(ino)}[h.rng.Intn(2)]
	}
	h.put(h.f.Index+"-locks", id, doc)
}

func (h *hostile) opDoc() {
	src, dst := h.anyPath(), h.anyPath()
	id := fmt.Sprintf("ghost%d", h.rng.Intn(5))
	body := map[string]any{"src": src, "dst": dst, "src_ino": h.anyIno(src), "src_type": h.anyType(), "locks": []any{}, "created": 0}
	if h.rng.Intn(3) == 0 {
		body["locks"] = "none"
	}
	doc := map[string]any{"kind": "op", "op": id, "state": []any{"prepared", "committed", "aborted", "done", "bogus", 1}[h.rng.Intn(6)],
		"owner": "ghost-session", "epoch": h.rng.Intn(3), "body": body}
	if h.rng.Intn(4) == 0 {
		doc["body"] = "x"
	}
	h.put(h.f.Index+"-locks", "O"+id, doc)
}

// put writes doc at index/id as is. Elasticsearch refuses some (a
// string where its mapping has a number): counted, not a failure.
func (h *hostile) put(index, id string, doc any) {
	body, err := json.Marshal(doc)
	if err != nil {
		h.t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", h.f.URL+"/"+index+"/_doc/"+id, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	switch {
	case res.StatusCode/100 == 2:
		h.written++
		shown := string(body)
		if len(shown) > 300 {
			shown = fmt.Sprintf("%s... (%d bytes)", shown[:300], len(body))
		}
		h.t.Logf("wrote %s/%s: %s", index, id, shown)
	case res.StatusCode == 400:
		h.refused++
	default:
		h.t.Fatalf("writing %s/%s: %s\n%s", index, id, res.Status, msg)
	}
}

// exercise runs lookups, stats, listings, reads and renames over the
// paths below /w on m, each bounded; errors are answers, hangs are not.
func (h *hostile) exercise(m *mounttest.Mount, round int) {
	h.roundStart = time.Now()
	for i := 0; i < 12; i++ {
		p := m.Path(strings.TrimPrefix(h.anyPath(), "/"))
		h.bounded(m, "stat "+p, func() error { _, err := os.Lstat(p); return err })
		h.bounded(m, "list "+p, func() error { _, err := os.ReadDir(p); return err })
		h.bounded(m, "read "+p, func() error {
			fh, err := os.Open(p)
			if err != nil {
				return err
			}
			defer fh.Close()
			_, err = io.Copy(io.Discard, io.LimitReader(fh, 4<<20))
			return err
		})
	}
	for i := 0; i < 3; i++ {
		src := m.Path(strings.TrimPrefix(h.anyPath(), "/"))
		dst := m.Path("w", fmt.Sprintf("moved%d.%d", round, i))
		if h.rng.Intn(2) == 0 {
			dst = m.Path(strings.TrimPrefix(h.anyPath(), "/"))
		}
		h.bounded(m, "rename "+src+" "+dst, func() error { return os.Rename(src, dst) })
	}
	h.walk(m, fmt.Sprintf("round %d", round))
}

// walk lists the tree below /w on m, bounded in depth (an entry that
// names an ancestor must not make it endless).
func (h *hostile) walk(m *mounttest.Mount, when string) {
	var list func(dir string, depth int) error
	list = func(dir string, depth int) error {
		es, err := os.ReadDir(dir)
		if err != nil || depth > 6 {
			return nil
		}
		for _, e := range es {
			if e.IsDir() {
				list(filepath.Join(dir, e.Name()), depth+1)
			} else {
				os.Lstat(filepath.Join(dir, e.Name()))
			}
		}
		return nil
	}
	h.bounded(m, when+": walk of w", func() error { return list(m.Path("w"), 0) })
}

// bounded runs call on m and fails the test if it hangs or the mount
// died.
func (h *hostile) bounded(m *mounttest.Mount, what string, call func() error) {
	h.t.Helper()
	start := time.Now()
	err := hostileCall(call)
	if err == errHung {
		h.t.Fatalf("%s on %s: %v", what, m.Dir, err)
	}
	if m.Exited() {
		h.t.Fatalf("%s: the mount at %s exited (%v)", what, m.Dir, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		h.t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
	}
	if !h.roundStart.IsZero() && time.Since(h.roundStart) > hostileRoundLimit {
		h.t.Fatalf("%s on %s: the round's calls took more than %v (%v)", what, m.Dir, hostileRoundLimit, err)
	}
}
