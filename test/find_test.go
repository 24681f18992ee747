package test

// esfs find as a user meets it: paths under a mount point or from the
// filesystem's root, a subdirectory mount, esfs's flags before find's
// words, what a mount holds in memory, both ways of fetching (inodes
// first, paths first), mistakes, and its help, completion and man page.

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestFind: esfs find prints GNU find's lines for paths under a mount
// (as given), from the filesystem's root, and under a subdirectory
// mount; it sees what a mount wrote in memory a moment ago; mistakes get
// one line and status 1 (find's own) or 2 (esfs's).
func TestFind(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `
mkdir -p projects/a/deep projects/b empty
head -c 3000000 /dev/zero > projects/a/big.iso
echo small > projects/a/small.txt
echo note > projects/b/note.txt
ln projects/a/small.txt projects/b/hardlink.txt
ln -s ../a/big.iso projects/b/link
touch -d '40 days ago' projects/a/deep/old.log
`)
	find := func(args ...string) mounttest.Result {
		t.Helper()
		return mounttest.Run(t, mounttest.Cmd{Args: append([]string{"find"}, args...), Env: []string{"ELASTICSEARCH_URL=" + f.URL, "ESFS_INDEX=" + f.Index},
			Split: true, Limit: time.Minute})
	}
	inDir := func(dir string, args ...string) mounttest.Result {
		t.Helper()
		cmd := exec.Command(f.Bin, append([]string{"find"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "ELASTICSEARCH_URL="+f.URL, "ESFS_INDEX="+f.Index)
		out, err := cmd.Output()
		r := mounttest.Result{Stdout: string(out)}
		if ee, ok := err.(*exec.ExitError); ok {
			r.Code, r.Stderr = ee.ExitCode(), string(ee.Stderr)
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}
	gnu := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("find", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("find %q: %v", args, err)
		}
		return string(out)
	}
	same := func(dir string, args ...string) {
		t.Helper()
		want := gnu(dir, args...)
		if r := inDir(dir, args...); r.Code != 0 || r.Stdout != want {
			t.Errorf("in %s, esfs find %q: status %d\n%s\nGNU find:\n%s\nstderr: %s", dir, args, r.Code, r.Stdout, want, r.Stderr)
		}
	}

	// Under the mount point, as given: absolute, relative, with a
	// trailing slash; the inode-first way (few large files) and the
	// path-first way (most files), the same lines.
	same("/", m.Path("projects"), "-size", "+1M")
	same(m.Dir, "projects", "-size", "-1M")
	same(m.Path("projects"), ".", "-name", "*.txt", "-printf", "%p %n %s %u\n")
	same(m.Dir, "projects/", "-mtime", "+30")
	same(m.Dir, ".", "-empty")
	same(m.Dir, "./projects/b", "./projects/a", "-type", "f", "-links", "2")
	same(m.Path("projects", "a"), "..", "-maxdepth", "1")

	// From the filesystem's root, when the path is under no mount of it.
	r := find("/projects/a", "-type", "f")
	if want := "/projects/a/big.iso\n/projects/a/deep/old.log\n/projects/a/small.txt\n"; r.Code != 0 || r.Stdout != want {
		t.Errorf("esfs find /projects/a -type f: status %d\n%s\nwant\n%s%s", r.Code, r.Stdout, want, r.Stderr)
	}
	// esfs's flags first, then find's words; the environment's values
	// are overridden.
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"find", "--es-url", f.URL, "--index", f.Index, "/projects", "-name", "note*"},
		Env: []string{"ESFS_INDEX=esfs-no-such-filesystem"}, Split: true, Limit: time.Minute})
	if r.Code != 0 || r.Stdout != "/projects/b/note.txt\n" {
		t.Errorf("esfs find --es-url --index /projects -name note*: status %d %q %s", r.Code, r.Stdout, r.Stderr)
	}

	// Without --index or ESFS_INDEX: the filesystem mounted there.
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"find", m.Path("projects", "b"), "-name", "note*"},
		Env: []string{"ELASTICSEARCH_URL=" + f.URL, "ESFS_INDEX="}, Split: true, Limit: time.Minute})
	if want := m.Path("projects", "b", "note.txt") + "\n"; r.Code != 0 || r.Stdout != want {
		t.Errorf("esfs find in a mount without --index: status %d %q %s", r.Code, r.Stdout, r.Stderr)
	}

	// A subdirectory mount: its paths are those under it.
	sub := f.Mount(t, "--subdir", "/projects/b")
	same(sub.Dir, ".", "-type", "l", "-printf", "%p -> %l\n")
	same("/", sub.Dir, "-newer", m.Path("projects", "a", "deep", "old.log"), "-name", "*.txt")

	// What a mount wrote in memory a moment ago (its delegation is
	// recalled first).
	if err := os.WriteFile(m.Path("projects", "a", "fresh.txt"), []byte("just now"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := inDir(m.Dir, "projects", "-name", "fresh.txt"); r.Stdout != "projects/a/fresh.txt\n" {
		t.Errorf("esfs find right after a write through the mount: %q %s", r.Stdout, r.Stderr)
	}

	// Mistakes: find's (status 1, GNU's words), and esfs's (status 2).
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{m.Path("nowhere"), m.Path("empty")}, 1, "‘" + m.Path("nowhere") + "’: No such file or directory"},
		{[]string{m.Path("projects", "a", "small.txt") + "/"}, 1, "Not a directory"},
		{[]string{m.Dir, "-name"}, 1, "missing argument to `-name'"},
		{[]string{m.Dir, "-frobnicate"}, 1, "unknown predicate `-frobnicate'"},
		{[]string{m.Dir, "-exec", "rm", "{}", ";"}, 1, "xargs"},
		{[]string{m.Dir, "(", "-name", "x"}, 1, "expecting to find a ')'"},
		{[]string{"--inde", "x", m.Dir}, 2, "unknown flag --inde: did you mean --index?"},
		{[]string{"relative/path"}, 2, "not in a mount of filesystem"},
	} {
		r := find(c.args...)
		if r.Code != c.code || !strings.Contains(r.Stderr, c.want) || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 0 {
			t.Errorf("esfs find %q: status %d, stderr %q; want %d and one line with %q", c.args, r.Code, r.Stderr, c.code, c.want)
		}
	}
	// A mount of another filesystem is refused, not read as this one's.
	other := mounttest.NewFS(t)
	om := other.Mount(t)
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"find", "--es-url", f.URL, "--index", f.Index, om.Dir}, Split: true, Limit: time.Minute})
	if r.Code != 2 || !strings.Contains(r.Stderr, "give --index "+other.Index) {
		t.Errorf("esfs find in a mount of another filesystem: status %d %q", r.Code, r.Stderr)
	}
}

// TestFindHelp: esfs help find and esfs find --help describe the
// expression and what differs from GNU find; completion offers find's
// words; the man page has the command.
func TestFindHelp(t *testing.T) {
	mounttest.QuickExit(t)
	for _, args := range [][]string{{"help", "find"}, {"find", "--help"}, {"find", "-h"}} {
		r := mounttest.Run(t, mounttest.Cmd{Args: args, Split: true, Limit: 30 * time.Second})
		for _, want := range []string{"esfs find", "-size [+-]N[bcwkMG]", "-printf FORMAT", "never followed", "--index"} {
			if r.Code != 0 || !strings.Contains(r.Stdout, want) {
				t.Errorf("esfs %q: status %d, lacks %q:\n%s%s", args, r.Code, want, r.Stdout, r.Stderr)
			}
		}
	}
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"help"}, Split: true, Limit: 30 * time.Second})
	if !strings.Contains(r.Stdout, "find ") {
		t.Errorf("esfs help does not list find:\n%s", r.Stdout)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"find", "/x", "-siz", "--generate-bash-completion"}, Split: true, Limit: 30 * time.Second})
	if !strings.Contains(r.Stdout, "-size\n") || !strings.Contains(r.Stdout, "-printf\n") {
		t.Errorf("completion after 'esfs find /x -siz': %q", r.Stdout)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"find", "--ind", "--generate-bash-completion"}, Split: true, Limit: 30 * time.Second})
	if !strings.Contains(r.Stdout, "--index\n") {
		t.Errorf("completion after 'esfs find --ind': %q", r.Stdout)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"completion", "fish"}, Split: true, Limit: 30 * time.Second})
	if !strings.Contains(r.Stdout, "find") {
		t.Errorf("the fish completion lacks find")
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"man"}, Split: true, Limit: 30 * time.Second})
	if !strings.Contains(r.Stdout, "find") || !strings.Contains(r.Stdout, "-printf FORMAT") {
		t.Errorf("esfs man lacks find and its expression")
	}
}
