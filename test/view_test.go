package test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// viewTree is the tree the rename tests below move: /top/old (a directory
// with files and a subdirectory) becomes /top/new; /top/keep stays.
const viewTree = `mkdir -p top/old/sub && for i in 1 2 3; do echo "zebra $i" > top/old/f$i; done && echo "zebra sub" > top/old/sub/g && echo other > top/keep`

// viewPaths lists the tree below /top with the renamed directory named dir,
// /top included, sorted as esfs search prints it.
func viewPaths(dir string) []string {
	out := []string{"/top", "/top/keep"}
	for _, p := range []string{"", "/f1", "/f2", "/f3", "/sub", "/sub/g"} {
		out = append(out, "/top/"+dir+p)
	}
	sort.Strings(out)
	return out
}

// viewFiles are the paths of viewPaths(dir) whose contents hold "zebra".
func viewFiles(dir string) []string {
	return []string{"/top/" + dir + "/f1", "/top/" + dir + "/f2", "/top/" + dir + "/f3", "/top/" + dir + "/sub/g"}
}

// viewCmd runs an esfs admin command with ELASTICSEARCH_URL cleared and
// without the race detector's sleep at exit; its output and its errors
// stay apart.
func viewCmd(args ...string) mounttest.Cmd {
	return mounttest.Cmd{Args: args, Env: []string{"ELASTICSEARCH_URL=", "GORACE=atexit_sleep_ms=0"}, Limit: 3 * time.Minute, Split: true}
}

func lines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestViewOfFrozenRename: a mount dies in the middle of renaming a
// directory with files, before its commit point or after it (and before
// cleaning up), and nobody finishes the rename meanwhile (the dead mount's
// lease is long). Every reader must then show exactly one tree: the one
// before the rename while it has not committed, the one after it once it
// has, never both names and never neither: esfs search by contents and by
// name, esfs export, and another mount's ls -R and find. (Before, export
// waited for the rename to end and failed after a minute, or copied the
// tree after a rename that had not happened when it started.)
func TestViewOfFrozenRename(t *testing.T) {
	for _, tc := range []struct {
		point string
		dir   string // the renamed directory's name readers must see
	}{
		{"rename-before-commit", "old"},
		{"rename-after-commit", "new"},
	} {
		t.Run(tc.point, func(t *testing.T) {
			f := mounttest.NewFS(t)
			// A lease longer than the export's former wait for renames in
			// flight: nobody declares the mount dead during the test.
			// Synchronous calls: the tree must be stored before the rename,
			// whose record is the only one the readers may meet.
			dying := f.MountAt(t, t.TempDir(), []string{"ESFS_CRASH_POINT=" + tc.point}, "--lease", "90s", "--write-delegations=false")
			mounttest.Sh(t, dying.Dir, viewTree)
			if err := os.Rename(dying.Path("top", "old"), dying.Path("top", "new")); err == nil {
				t.Fatal("the rename succeeded although the mount was to die in it")
			}
			if _, ok := dying.WaitExit(60 * time.Second); !ok {
				t.Fatal("the mount did not die at its crash point")
			}
			ops, err := f.Store.SearchOps(context.Background())
			if err != nil || len(ops) != 1 {
				t.Fatalf("operation records: %+v %v", ops, err)
			}
			op := ops[0]
			t.Logf("frozen rename: %s, %s", op.ID, op.State)

			admin := []string{"--es-url", f.URL, "--index", f.Index}
			search := func(args ...string) []string {
				t.Helper()
				r := mounttest.Run(t, viewCmd(append(append([]string{"search"}, admin...), args...)...))
				if r.Code > 1 {
					t.Fatalf("esfs search %q: status %d: %s", args, r.Code, r.Stderr)
				}
				return lines(r.Stdout)
			}
			check := func(what string, got, want []string) {
				t.Helper()
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s shows\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			check("esfs search zebra", search("zebra"), viewFiles(tc.dir))
			check("esfs search --name '*'", search("--name", "*"), viewPaths(tc.dir))
			check("esfs search --name 'f*'", search("--name", "f*"), viewFiles(tc.dir)[:3])

			local := filepath.Join(t.TempDir(), "out")
			r := mounttest.Run(t, viewCmd(append(append([]string{"export"}, admin...), "/top", local)...))
			if r.Code != 0 {
				t.Errorf("esfs export: status %d: %s", r.Code, r.Stderr)
			} else {
				var got []string
				for _, l := range lines(mounttest.Sh(t, local, `find . | LC_ALL=C sort`)) {
					got = append(got, "/top"+strings.TrimPrefix(l, "."))
				}
				check("esfs export", got, viewPaths(tc.dir))
				if b, err := os.ReadFile(filepath.Join(local, tc.dir, "sub", "g")); err != nil || string(b) != "zebra sub\n" {
					t.Errorf("exported %s/sub/g: %q %v", tc.dir, b, err)
				}
			}

			other := f.Mount(t)
			var got []string
			for _, l := range lines(mounttest.Sh(t, other.Dir, `find top | LC_ALL=C sort`)) {
				got = append(got, "/"+l)
			}
			check("find on another mount", got, viewPaths(tc.dir))
			lsR := mounttest.Sh(t, other.Path("top"), `LC_ALL=C ls -R`)
			wantLs := ".:\nkeep\n" + tc.dir + "\n\n./" + tc.dir + ":\nf1\nf2\nf3\nsub\n\n./" + tc.dir + "/sub:\ng\n"
			if lsR != wantLs {
				t.Errorf("ls -R on another mount:\n%s\nwant\n%s", lsR, wantLs)
			}

			// The checks are only worth something if the rename stayed
			// where the mount died.
			if rec, err := f.Store.GetOp(context.Background(), op.ID); err != nil || rec.State != op.State {
				t.Fatalf("the rename moved on during the checks: %+v %v", rec, err)
			}
		})
	}
}

// TestViewSearchRenameFinishedMeanwhile: esfs search reads its hits from a
// refreshed index, then judges those that carry a rename's intent by the
// rename's record; here the rename (committed by a mount that died) is
// finished by another mount in between, while search's read of the record
// is held. The new names' hits then carry the intent of a rename that is
// done, which alone would hide them: search must read them again and find
// the files under their new names (before, it found nothing).
func TestViewSearchRenameFinishedMeanwhile(t *testing.T) {
	f := mounttest.NewFS(t)
	dying := f.MountAt(t, t.TempDir(), []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--lease", "2s", "--write-delegations=false") // a journaled rename
	mounttest.Sh(t, dying.Dir, viewTree)
	_ = os.Rename(dying.Path("top", "old"), dying.Path("top", "new"))
	if _, ok := dying.WaitExit(60 * time.Second); !ok {
		t.Fatal("the mount did not die at its crash point")
	}
	ops, err := f.Store.SearchOps(context.Background(), store.OpCommitted)
	if err != nil || len(ops) != 1 {
		t.Fatalf("committed renames: %+v %v", ops, err)
	}
	op := ops[0].ID

	fp := mounttest.NewFaultProxy(t, f.URL)
	held := make(chan struct{})
	var once sync.Once
	record := fp.Add(&mounttest.Fault{Match: func(method, path string, body []byte) bool {
		if method == http.MethodGet && strings.Contains(path, "-locks/_doc/") {
			once.Do(func() { close(held) })
			return true
		}
		return false
	}, Delay: 30 * time.Second})
	done := make(chan mounttest.Result, 1)
	go func() {
		done <- mounttest.Run(t, viewCmd("search", "--es-url", fp.URL, "--index", f.Index, "--es-timeout", "90s", "zebra"))
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("search ended without reading the rename's record: status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("search did not read the rename's record within 60s")
	}
	f.Mount(t, "--lease", "2s") // finishes the dead mount's rename
	for deadline := time.Now().Add(25 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rec, err := f.Store.GetOp(context.Background(), op); err == nil && rec.State == store.OpDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead mount's rename was not finished by another mount within 25s")
		}
	}
	select {
	case <-record.Fired():
		t.Fatal("search's read of the record was answered before the rename was finished: nothing tested")
	default:
	}
	r := <-done
	if r.Code != 0 || strings.Join(lines(r.Stdout), "\n") != strings.Join(viewFiles("new"), "\n") {
		t.Errorf("esfs search zebra: status %d\n%s%s\nwant\n%s", r.Code, r.Stdout, r.Stderr, strings.Join(viewFiles("new"), "\n"))
	}
}
