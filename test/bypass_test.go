package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// The admin commands read the indices directly, bypassing every mount:
// export, search, fsck and status must see every write that completed
// before they started, and export must fail rather than copy fewer files
// when the listing and the documents disagree.

// slowRefresh sets the filesystem's refresh interval to a minute, as a
// busy cluster might: nothing written is visible to search until someone
// refreshes, so a command that forgets to fails every time, not one time
// in a few.
func slowRefresh(t *testing.T, f *mounttest.FS) {
	t.Helper()
	esDo(t, f.URL, "PUT", "/"+f.Index+","+f.Index+"-*/_settings", `{"index":{"refresh_interval":"60s"}}`)
}

// esDo sends one request to the cluster and fails the test unless it
// answers 2xx.
func esDo(t *testing.T, base, method, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s\n%s", method, path, res.Status, b)
	}
	return b
}

// esfsCmd runs an esfs command on f (through url, if not empty) and
// returns its output and exit status.
func esfsCmd(t *testing.T, f *mounttest.FS, url string, args ...string) (string, int) {
	t.Helper()
	if url == "" {
		url = f.URL
	}
	out, code, took := runCLI(t, 3*time.Minute, append([]string{args[0], "--es-url", url, "--index", f.Index}, args[1:]...)...)
	t.Logf("esfs %s: %s", strings.Join(args, " "), took.Round(time.Millisecond))
	return out, code
}

// quickExit spares each command run by the test the race detector's
// second of sleep at exit (the binary is built with -race).
func quickExit(t *testing.T) { t.Setenv("GORACE", "atexit_sleep_ms=0") }

// smallTree is a local tree with one of everything export keeps.
func smallTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Sh(t, src, `
mkdir -p a/b/c empty
printf 'hello\n' > a/hello.txt
printf 'deep\n' > a/b/c/deep.txt
ln a/hello.txt a/b/hard-link
ln -s ../hello.txt a/b/rel-link
for i in 1 2 3 4 5; do printf 'file %d\n' $i > a/f$i; done
touch -d '2010-01-01 00:00:00' a/b/c a/b a empty
`)
	return src
}

// TestAdminReadsSeeCompletedWrites: export right after import exports the
// whole tree; a file closed on a mount a moment before an export, a search
// or an fsck is in what they show; status shows a mount that just started.
// The refresh interval is a minute, so each of them sees those writes only
// if it refreshes (or reads in real time) before it looks.
func TestAdminReadsSeeCompletedWrites(t *testing.T) {
	quickExit(t)
	f := mounttest.NewFS(t)
	slowRefresh(t, f)
	m := f.Mount(t)

	src := smallTree(t)
	if out, code := esfsCmd(t, f, "", "import", src, "/imported"); code != 0 {
		t.Fatalf("import: %d\n%s", code, out)
	}
	dst := filepath.Join(t.TempDir(), "exported")
	out, code := esfsCmd(t, f, "", "export", "/imported", dst)
	if code != 0 {
		t.Fatalf("export right after import: status %d\n%s", code, out)
	}
	sameTree(t, src, dst, false)

	// Written and closed through the mount, then exported at once.
	mounttest.Sh(t, m.Dir, `mkdir -p w/sub && printf 'zebra crossing\n' > w/sub/fresh.txt && printf 'old\n' > w/gone.txt`)
	mounttest.Sh(t, m.Dir, `rm w/gone.txt && printf 'quagga\n' > w/second.txt`)
	dst2 := filepath.Join(t.TempDir(), "w")
	out, code = esfsCmd(t, f, "", "export", "/w", dst2)
	if code != 0 || strings.Contains(out, "removed during the export") {
		t.Fatalf("export right after writes: status %d\n%s", code, out)
	}
	if got := mounttest.Sh(t, dst2, `find . | sort && cat sub/fresh.txt second.txt`); got != ".\n./second.txt\n./sub\n./sub/fresh.txt\nzebra crossing\nquagga\n" {
		t.Errorf("exported right after the writes:\n%s", got)
	}

	// Search, by contents and by name, right after a write.
	mounttest.Sh(t, m.Dir, `printf 'okapi giraffe\n' > w/sub/just-written.txt`)
	if out, code := esfsCmd(t, f, "", "search", "okapi"); code != 0 || out != "/w/sub/just-written.txt\n" {
		t.Errorf("search right after a write: status %d, %q", code, out)
	}
	mounttest.Sh(t, m.Dir, `mv w/sub/just-written.txt w/renamed.txt`)
	if out, code := esfsCmd(t, f, "", "search", "--name", "renamed.*"); code != 0 || out != "/w/renamed.txt\n" {
		t.Errorf("search --name right after a rename: status %d, %q", code, out)
	}

	// fsck counts what was just made, and sees damage made a moment ago.
	paths := func() int {
		t.Helper()
		out, code := esfsCmd(t, f, "", "fsck", "--no-wait")
		if code != 0 && code != 4 {
			t.Fatalf("fsck: status %d\n%s", code, out)
		}
		n, err := strconv.Atoi(strings.Fields(out)[0])
		if err != nil {
			t.Fatalf("fsck output: %q", out)
		}
		return n
	}
	before := paths()
	mounttest.Sh(t, m.Dir, `mkdir w/x && touch w/x/1 w/x/2`)
	if after := paths(); after != before+3 {
		t.Errorf("fsck right after mkdir and two creates counts %d paths, want %d", after, before+3)
	}
	writeOrphanPath(t, f, "/w/nowhere/orphan")
	if out, code := esfsCmd(t, f, "", "fsck", "--no-wait"); code != 4 || !strings.Contains(out, "orphan path: /w/nowhere/orphan") {
		t.Errorf("fsck right after an orphan path was written: status %d\n%s", code, out)
	}

	// status lists a mount that has just started.
	m2 := f.Mount(t)
	if out, code := esfsCmd(t, f, "", "status", "--observe", "10ms"); code != 0 || !strings.Contains(out, m2.Dir) {
		t.Errorf("status right after a mount: status %d\n%s", code, out)
	}
	if _, err := os.Stat(m.Path("w")); err != nil {
		t.Errorf("the mount died: %v", err)
	}
}

// writeOrphanPath writes, straight into the index, a file whose path
// names a directory that does not exist (with its inode, so that only the
// parent is missing).
func writeOrphanPath(t *testing.T, f *mounttest.FS, path string) {
	t.Helper()
	ctx := context.Background()
	a := store.Inode{Ino: store.NewIno(), Type: store.TypeFile, Mode: 0o644, Nlink: 1}
	if _, err := f.Store.CreateInode(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Store.CreateDentry(ctx, store.Dentry{Path: path, Ino: a.Ino, Type: store.TypeFile}); err != nil {
		t.Fatal(err)
	}
}

// TestExportFailsOnInconsistentIndex: export copies what it can, names
// every entry it could not, and exits non-zero when the listing and the
// documents disagree: a path whose directory does not exist, a path whose
// inode does not exist, an unreadable path document, SRC that a direct
// read finds but the listing lacks, and a listing page that fails.
func TestExportFailsOnInconsistentIndex(t *testing.T) {
	quickExit(t)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `mkdir -p t/a t/b/c && echo 1 > t/a/f1 && echo 2 > t/b/f2 && echo 3 > t/b/c/f3 && echo ok > t/ok`)
	export := func(url, src string) (string, int, string) {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "out")
		out, code := esfsCmd(t, f, url, "export", src, dst)
		return out, code, dst
	}
	if out, code, _ := export("", "/t"); code != 0 {
		t.Fatalf("export of a consistent tree: status %d\n%s", code, out)
	}

	// A path whose directory is missing: the rest is copied, it is named.
	writeOrphanPath(t, f, "/t/ghost/child")
	out, code, dst := export("", "/t")
	if code != 1 || !strings.Contains(out, "/t/ghost/child: not copied: its directory /t/ghost is not in the listing") ||
		!strings.Contains(out, "1 entries of /t were not copied") {
		t.Errorf("export with an orphan path: status %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "b", "c", "f3")); err != nil || string(b) != "3\n" {
		t.Errorf("the consistent part was not copied: %q %v", b, err)
	}
	removeDoc(t, f, f.Index, store.DocID("/t/ghost/child"))

	// A path whose inode is gone (while the path still names it), with the
	// directory below it: both left out, the path named.
	var st unix.Stat_t
	if err := unix.Stat(m.Path("t", "b"), &st); err != nil {
		t.Fatal(err)
	}
	removeDoc(t, f, f.Index+"-inodes", strconv.FormatUint(st.Ino, 10))
	out, code, dst = export("", "/t")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("/t/b: not copied: its inode %d does not exist", st.Ino)) ||
		!strings.Contains(out, "4 entries of /t were not copied") {
		t.Errorf("export with a missing inode: status %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dst, "a", "f1")); err != nil {
		t.Errorf("the consistent part was not copied: %v", err)
	}

	// An unreadable path document.
	mounttest.Sh(t, m.Dir, `mkdir u && echo x > u/x`)
	esDo(t, f.URL, "PUT", "/"+f.Index+"/_doc/not-a-path-id", `{"path":"/u/y","parent":"/u","name":"y","ino":12345,"type":"bogus"}`)
	out, code, _ = export("", "/u")
	if code != 1 || !strings.Contains(out, "an unreadable path document, not copied") || !strings.Contains(out, "/u/y") {
		t.Errorf("export with a damaged path document: status %d\n%s", code, out)
	}
	removeDoc(t, f, f.Index, "not-a-path-id")

	// A subdirectory whose path document is lost: the directory's link
	// count still counts it, so the listing is known to lack something.
	mounttest.Sh(t, m.Dir, `mkdir -p w/s1 w/s2 && echo x > w/s1/x`)
	if out, code, _ := export("", "/w"); code != 0 {
		t.Fatalf("export of a consistent /w: status %d\n%s", code, out)
	}
	removeDoc(t, f, f.Index, store.DocID("/w/s2"))
	out, code, dst = export("", "/w")
	if code != 1 || !strings.Contains(out, "/w: directory with 4 links, but its listing shows 1 subdirectories") {
		t.Errorf("export with a subdirectory missing from the listing: status %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "s1", "x")); err != nil || string(b) != "x\n" {
		t.Errorf("the consistent part was not copied: %q %v", b, err)
	}

	// SRC exists, but the listing lacks it: here a refresh that does not
	// happen, with a refresh interval of a minute.
	slowRefresh(t, f)
	src := smallTree(t)
	if out, code := esfsCmd(t, f, "", "import", src, "/v"); code != 0 {
		t.Fatalf("import: %d\n%s", code, out)
	}
	noRefresh := interceptProxy(t, f.URL, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/_refresh") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"_shards":{"total":1,"successful":1,"failed":0}}`))
			return true
		}
		return false
	})
	out, code, _ = export(noRefresh, "/v")
	if code != 1 || !strings.Contains(out, "/v exists (read directly) but the listing of the index does not show it") {
		t.Errorf("export of a SRC missing from the listing: status %d\n%s", code, out)
	}

	// A listing page that fails: the export fails, naming SRC.
	proxy := mounttest.NewFaultProxy(t, f.URL)
	proxy.Add(&mounttest.Fault{Match: func(method, path string, body []byte) bool {
		return path == "/_search" && bytes.Contains(body, []byte(`"sort":[{"path"`))
	}, Reset: true})
	out, code, _ = export(proxy.URL, "/t/a")
	if code != 1 || !strings.Contains(out, "listing /t/a failed") {
		t.Errorf("export with a failing listing page: status %d\n%s", code, out)
	}

	if _, err := os.Stat(m.Path("t", "ok")); err != nil {
		t.Errorf("the mount died: %v", err)
	}
}

// removeDoc deletes one document straight from an index, bypassing esfs.
func removeDoc(t *testing.T, f *mounttest.FS, index, id string) {
	t.Helper()
	esDo(t, f.URL, "DELETE", "/"+url.PathEscape(index)+"/_doc/"+url.PathEscape(id)+"?refresh=true", "")
}

// interceptProxy relays requests to the cluster at target, except those
// hook answers itself (it returns true then).
func interceptProxy(t *testing.T, target string, hook func(w http.ResponseWriter, r *http.Request, body []byte) bool) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if hook(w, r, body) {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}

// TestExportDuringRenameRecovery: a directory rename of a mount that died
// after its commit point is finished by another mount while an export
// reads the tree. The export's snapshot was taken before the finish, so
// its documents carry the rename's intents; judged against the record
// once the rename is done, the old names are hidden (committed) and the
// staged new ones too (their intent outlived the rename). Export must copy
// the directory whole, under one name or the other, never drop it.
func TestExportDuringRenameRecovery(t *testing.T) {
	f := mounttest.NewFS(t)
	dying := f.MountAt(t, t.TempDir(), []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--lease", "2s")
	mounttest.Sh(t, dying.Dir, `mkdir -p r/src && for i in $(seq 20); do echo $i > r/src/f$i; done && echo keep > r/keep`)
	_ = exec.Command("mv", dying.Path("r", "src"), dying.Path("r", "dst")).Run() // the mount dies at its commit point
	if err, ok := dying.WaitExit(60 * time.Second); !ok {
		t.Fatal("the mount did not die at its crash point")
	} else {
		t.Logf("mount at its crash point: %v", err)
	}
	ops, err := f.Store.SearchOps(context.Background(), store.OpCommitted)
	if err != nil || len(ops) != 1 {
		t.Fatalf("committed renames: %v %v", ops, err)
	}
	op := ops[0].ID

	// The export's first search over its snapshot is held until the rename
	// has been finished by another mount.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := interceptProxy(t, f.URL, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if r.URL.Path == "/_search" && bytes.Contains(body, []byte(`"pit"`)) {
			once.Do(func() { close(held); <-release })
		}
		return false
	})
	defer once.Do(func() {}) // nothing left held if the test fails early
	dst := filepath.Join(t.TempDir(), "out")
	var out bytes.Buffer
	cmd := exec.Command(f.Bin, "export", "--es-url", hold, "--index", f.Index, "/r", dst)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-held:
	case err := <-exited:
		t.Fatalf("export ended before listing: %v\n%s", err, out.String())
	case <-time.After(60 * time.Second):
		t.Fatal("export did not list within 60s")
	}
	recoverer := f.Mount(t, "--lease", "2s")
	waitFor(t, "the dead mount's rename finished by another mount", 60*time.Second, func() bool {
		rec, err := f.Store.GetOp(context.Background(), op)
		return err == nil && rec.State == store.OpDone
	})
	close(release)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("export: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("export did not end:\n%s", out.String())
	}
	t.Logf("export: %s", strings.TrimSpace(out.String()))
	got := mounttest.Sh(t, dst, `find . -type f | sort | xargs cat | sort -n | tr '\n' ' '`)
	want := "keep "
	for i := 1; i <= 20; i++ {
		want += strconv.Itoa(i) + " "
	}
	if got != want {
		t.Errorf("exported contents %q, want %q", got, want)
	}
	if names := mounttest.Sh(t, dst, `ls`); names != "dst\nkeep\n" && names != "keep\nsrc\n" {
		t.Errorf("exported names %q, want the renamed directory under one name", names)
	}
	if _, err := os.Stat(recoverer.Path("r", "dst", "f20")); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

// TestFsckRepairSparesChangesMadeDuringIt: fsck compares a snapshot of the
// paths with a scan of the inodes made after it. A file created, a hard
// link made and a file removed between the two (here: while fsck's inode
// scan is held) are not damage: fsck --repair must leave them alone (before,
// it deleted the new file's inode and data, and lowered the link count
// below the file's paths), and report the filesystem clean.
func TestFsckRepairSparesChangesMadeDuringIt(t *testing.T) {
	quickExit(t)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `echo linked > linked && echo doomed > doomed && mkdir d0`)
	if out, code := esfsCmd(t, f, "", "fsck", "--no-wait"); code != 0 {
		t.Fatalf("fsck before: status %d\n%s", code, out)
	}

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := interceptProxy(t, f.URL, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if r.Method == http.MethodPost && r.URL.Path == "/"+f.Index+"-inodes/_search" {
			once.Do(func() { close(held); <-release })
		}
		return false
	})
	defer once.Do(func() {})
	var out bytes.Buffer
	cmd := exec.Command(f.Bin, "fsck", "--repair", "--no-wait", "--es-url", hold, "--index", f.Index)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-held:
	case err := <-exited:
		t.Fatalf("fsck ended before scanning inodes: %v\n%s", err, out.String())
	case <-time.After(60 * time.Second):
		t.Fatal("fsck did not scan inodes within 60s")
	}
	mounttest.Sh(t, m.Dir, `echo born > born && ln linked link2 && rm doomed && mkdir d0/new`)
	esDo(t, f.URL, "POST", "/"+f.Index+","+f.Index+"-*/_refresh", "")
	close(release)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("fsck --repair during changes: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("fsck did not end:\n%s", out.String())
	}
	t.Logf("fsck: %s", out.String())
	ctx := context.Background()
	for name, nlink := range map[string]uint32{"born": 1, "linked": 2} {
		d, err := f.Store.GetDentry(ctx, "/"+name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, err := f.Store.GetInode(ctx, d.Ino)
		if err != nil || a.Nlink != nlink {
			t.Errorf("%s after fsck --repair: inode %+v, %v; want %d links", name, a, err, nlink)
		}
	}
	// A mkdir between the snapshots moved directory link counts too.
	for name, nlink := range map[string]uint32{"/d0": 3, "/d0/new": 2} {
		d, err := f.Store.GetDentry(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a, err := f.Store.GetInode(ctx, d.Ino); err != nil || a.Nlink != nlink {
			t.Errorf("directory %s after fsck --repair: inode %+v, %v; want %d links", name, a, err, nlink)
		}
	}
	if got := mounttest.Sh(t, m.Dir, `cat born link2`); got != "born\nlinked\n" {
		t.Errorf("contents after fsck --repair: %q", got)
	}
}
