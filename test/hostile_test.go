package test

// Hostile and damaged documents, as the mount meets them: every mount's
// credentials may write any document into the filesystem's indices, and
// a bad write or damage may leave anything there. A document that breaks
// the model answers EIO for the paths it touches, logged with its id,
// and never makes a mount loop, grow without bound, crash or hang; the
// rest of the tree keeps working.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
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
