package test

// A mount bounds the names its delegations keep (--names-kept): past it,
// the directories used least recently are forgotten, here and in the
// kernel (fs/vfs/deleg_shed.go), so that a find or du of a million files
// does not keep a million names, kernel inodes and go-fuse nodes. What
// is forgotten is read again when used, and what other mounts change in
// such a directory is seen at once, as in any other.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

func TestNamesKeptBound(t *testing.T) {
	const dirs, files, kept = 6, 400, 1000
	src := t.TempDir()
	for d := 0; d < dirs; d++ {
		dir := filepath.Join(src, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < files; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	addr := mounttest.FreeAddr(t)
	// A long lease: what the kernel is told under a delegation it keeps for
	// the lease, so that only the bound makes it forget within the test.
	a := f.Mount(t, "--names-kept", fmt.Sprint(kept), "--lease", "60s", "--metrics-addr", addr)
	b := f.Mount(t)
	metric := func(name string, labels ...string) float64 {
		return mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), name, labels...)
	}
	want := make([]string, files)
	for i := range want {
		want[i] = fmt.Sprintf("f%04d", i)
	}
	listAll := func() {
		for d := 0; d < dirs; d++ {
			out, err := exec.Command("ls", "-l", a.Path("t", fmt.Sprintf("d%d", d))).CombinedOutput()
			if err != nil {
				t.Fatalf("ls -l: %v\n%s", err, out)
			}
			if n := strings.Count(string(out), "\n") - 1; n != files {
				t.Fatalf("ls -l of d%d listed %d entries, want %d", d, n, files)
			}
		}
	}
	// The first pass asks for the delegations (granted in the background);
	// later ones list under them, and the names they learn pass the bound.
	deadline := time.Now().Add(2 * time.Minute)
	for metric("esfs_delegation_names_shed_total") < 2*files {
		if time.Now().After(deadline) {
			t.Fatalf("after listing %d directories of %d again and again with --names-kept %d, %v names were shed", dirs, files, kept, metric("esfs_delegation_names_shed_total"))
		}
		listAll()
	}
	if held := metric("esfs_delegation_names"); held > kept+2*files {
		t.Errorf("delegations keep %v names with --names-kept %d", held, kept)
	}

	// The kernel was made to forget the names of the directory used least
	// recently: a stat of each asks the mount again.
	listAll()
	lookups := metric("esfs_fuse_request_duration_seconds", "op", "LOOKUP")
	for i := 0; i < files; i++ {
		if _, err := os.Lstat(a.Path("t", "d0", want[i])); err != nil {
			t.Fatal(err)
		}
	}
	if asked := metric("esfs_fuse_request_duration_seconds", "op", "LOOKUP") - lookups; asked < files/2 {
		t.Errorf("stat of the %d files of the directory used least recently asked the mount %v lookups: the kernel kept their names", files, asked)
	}

	// What another mount changes in directories forgotten here, or not, is
	// seen at once.
	listAll()
	if err := os.WriteFile(b.Path("t", "d0", "f0001"), []byte("longer now\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path("t", "d1", "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(b.Path("t", "d5", "f0002")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(a.Path("t", "d0", "f0001")); err != nil || fi.Size() != int64(len("longer now\n")) {
		t.Errorf("after another mount rewrote d0/f0001: %v, %v", fi, err)
	}
	if _, err := os.Lstat(a.Path("t", "d5", "f0002")); !os.IsNotExist(err) {
		t.Errorf("d5/f0002, removed by another mount: %v", err)
	}
	for d := 0; d < dirs; d++ {
		got, err := os.ReadDir(a.Path("t", fmt.Sprintf("d%d", d)))
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, len(got))
		for i, e := range got {
			names[i] = e.Name()
		}
		exp := slices.Clone(want)
		switch d {
		case 1:
			exp = append(exp, "new")
		case 5:
			exp = slices.DeleteFunc(exp, func(n string) bool { return n == "f0002" })
		}
		slices.Sort(exp)
		if !slices.Equal(names, exp) {
			t.Errorf("d%d lists %d names, want %d (%v...)", d, len(names), len(exp), names[:min(3, len(names))])
		}
	}
}
