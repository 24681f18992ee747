package mounttest

// Small tools of the tests that work on whole trees (import, export,
// copies, fsck), and reads of what the index holds.

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/store"
)

// ESRequest sends one request to the cluster and fails the test unless it
// answers 2xx.
func ESRequest(t testing.TB, base, method, path, body string) []byte {
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

// MustReadFile reads a file through a fresh open.
func MustReadFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// StoredChunks lists the chunk numbers the data index holds for ino.
func StoredChunks(t testing.TB, f *FS, ino uint64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx, store.SearchedData); err != nil {
		t.Fatal(err)
	}
	nums, err := f.Store.StoredChunks(ctx, ino, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return nums
}

// Ino returns the inode number of path, failing the test on error.
func Ino(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// Quote quotes s for bash.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Step runs fn and logs how long it took.
func Step(t testing.TB, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// RandomBytes returns deterministic bytes, so that failures reproduce.
func RandomBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// WriteFileMode writes path with data and gives it exactly mode.
func WriteFileMode(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// SameLines fails the test with the lines only one side has.
func SameLines(t testing.TB, what string, want, got []string) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, l := range want {
		wantSet[l] = true
	}
	gotSet := map[string]bool{}
	for _, l := range got {
		gotSet[l] = true
	}
	var missing, extra []string
	for _, l := range want {
		if !gotSet[l] {
			missing = append(missing, l)
		}
	}
	for _, l := range got {
		if !wantSet[l] {
			extra = append(extra, l)
		}
	}
	if len(missing) == 0 && len(extra) == 0 && len(want) == len(got) {
		return
	}
	cut := func(s []string) []string {
		if len(s) > 25 {
			return append(s[:25:25], fmt.Sprintf("... and %d more", len(s)-25))
		}
		return s
	}
	t.Errorf("%s: %d lines expected, %d found; %d differ\nexpected, not found:\n  %s\nfound, not expected:\n  %s",
		what, len(want), len(got), len(missing)+len(extra),
		strings.Join(cut(missing), "\n  "), strings.Join(cut(extra), "\n  "))
}

// DiffTrees fails the test when diff -r finds any difference (symlinks are
// compared as links, not followed).
func DiffTrees(t testing.TB, a, b string) {
	t.Helper()
	Sh(t, "/", "diff -r --no-dereference "+Quote(a)+" "+Quote(b))
}

// CountLines counts the lines of s, ignoring surrounding blank space.
func CountLines(s string) int {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// FsckClean runs esfs fsck (check only) on the filesystem and fails the test
// unless it finds the filesystem clean.
func FsckClean(t testing.TB, f *FS) {
	t.Helper()
	var out string
	var err error
	Step(t, "esfs fsck", func() { out, err = f.Run("fsck", "--no-wait") })
	if err != nil || !strings.HasSuffix(out, "clean\n") {
		t.Errorf("esfs fsck: %v\n%s", err, out)
		return
	}
	t.Logf("esfs fsck: %s", strings.SplitN(out, "\n", 2)[0])
}

// WriteTree writes files (relative path -> content) below root with a few
// parallel writers, making directories first.
func WriteTree(t testing.TB, root string, files map[string][]byte, workers int) {
	t.Helper()
	dirs := map[string]bool{}
	for p := range files {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents before children
	for _, d := range sorted {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range paths {
				if err := os.WriteFile(filepath.Join(root, p), files[p], 0o644); err != nil {
					errs <- err
					for range paths {
					}
					return
				}
			}
		}()
	}
	for p := range files {
		paths <- p
	}
	close(paths)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// CountPaths refreshes and counts the path documents at and below root.
func CountPaths(t testing.TB, f *FS, root string) int {
	t.Helper()
	return len(ScanPaths(t, f, root))
}

// ScanPaths refreshes and lists the path documents at and below root,
// failing the test on corrupt documents.
func ScanPaths(t testing.TB, f *FS, root string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx, store.SearchedPaths); err != nil {
		t.Fatal(err)
	}
	sc := f.Store.ScanTree(root, 1000)
	defer sc.Close()
	var paths []string
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("corrupt path document: %v", b)
		}
		if page == nil {
			return paths
		}
		for _, d := range page {
			paths = append(paths, d.Path)
		}
	}
}

// DirLinksAgree checks, through the mount, that every directory's link
// count is 2 plus what find(1) lists as its subdirectories, and that ls
// agrees with stat.
func DirLinksAgree(t testing.TB, dir string) {
	t.Helper()
	out := Sh(t, dir, `
find . -type d | while read -r d; do
	want=$(( 2 + $(find "$d" -mindepth 1 -maxdepth 1 -type d | wc -l) ))
	st=$(stat -c %h "$d")
	ls=$(ls -lad "$d" | awk '{print $2}')
	if [ "$st" != "$want" ] || [ "$ls" != "$want" ]; then echo "$d: stat $st, ls $ls, want $want"; fi
done`)
	if out != "" {
		t.Errorf("directory link counts in %s:\n%s", dir, out)
	}
}

// Links returns the link count of path, failing the test on error.
func Links(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Nlink)
}

// FsckCleanAfterCrash waits (within limit) until esfs fsck finds the index
// clean, once a dead mount's work is recovered. Data chunks a killed mount
// wrote for a file whose inode never landed (a create still in memory, or
// a size not written yet) are garbage nobody sees, which fsck reports as
// leftover data and --repair removes: that is allowed, and repaired.
func FsckCleanAfterCrash(t testing.TB, f *FS, limit time.Duration) {
	t.Helper()
	var last string
	ok := false
	WaitFor(t, "fsck clean after recovery", limit, func() bool {
		out, err := f.Run("fsck")
		last = out
		switch {
		case err == nil:
			ok = true
			return true
		case onlyLeftoverProblems(out):
			if out, err := f.Run("fsck", "--repair"); err == nil || !strings.Contains(out, "all repaired") {
				t.Errorf("esfs fsck --repair of leftover data (%v):\n%s", err, out)
			}
			out, err := f.Run("fsck")
			last, ok = out, err == nil
			return true
		}
		return false
	})
	if !ok {
		t.Errorf("esfs fsck after recovery:\n%s", last)
	}
}

// onlyLeftoverProblems reports whether fsck's problems (its "N problems"
// line) are all leftover data of dead mounts.
func onlyLeftoverProblems(out string) bool {
	leftover, problems := 0, -1
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "leftover data:") && strings.Contains(l, "dead or ended mount") {
			leftover++
		}
		var n, left int
		if _, err := fmt.Sscanf(l, "%d problems, %d left", &n, &left); err == nil {
			problems = n
		}
	}
	return problems > 0 && problems == leftover
}
