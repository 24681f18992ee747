package bench

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sourceTree copies part of Go's own source tree (the packages of dirs,
// below $(go env GOROOT)/src) to a local directory, and makes of it a
// tarball and a git repository with one commit: the inputs of the
// real-tools case. It returns the tree, the tarball, the repository and
// how many entries the tree has.
func sourceTree(t testing.TB, dirs []string) (tree, tarball, repo string, entries int) {
	goroot := strings.TrimSpace(output(t, "go", "env", "GOROOT"))
	base := t.TempDir()
	tree = filepath.Join(base, "src")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		output(t, "cp", "-a", filepath.Join(goroot, "src", d), filepath.Join(tree, d))
	}
	if err := filepath.WalkDir(tree, func(string, fs.DirEntry, error) error { entries++; return nil }); err != nil {
		t.Fatal(err)
	}
	tarball = filepath.Join(base, "src.tar")
	output(t, "tar", "-cf", tarball, "-C", base, "src")
	repo = filepath.Join(base, "repo")
	output(t, "cp", "-a", tree, repo)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "Go source tree"}} {
		output(t, "git", append([]string{"-C", repo}, args...)...)
	}
	return tree, tarball, repo, entries
}

// run runs a command and returns its wall time. Its output goes through
// a pipe and is discarded: GNU grep stops at the first match when its
// output is /dev/null.
func run(t testing.TB, dir, name string, args ...string) time.Duration {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout = io.Discard
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return d
}

// grepWord occurs in some of the files, not all: grep reads every file
// to the end.
const grepWord = "Deprecated"

func benchRealTools(s *suite) {
	t := s.t
	dirs := []string{"encoding", "net"}
	if s.scale == "full" {
		dirs = append(dirs, "crypto", "runtime")
	}
	tree, tarball, repo, entries := sourceTree(t, dirs)
	esfs, juice, loop := s.peerMounts()
	steps := []struct{ name, workload string }{
		{"cp -a", "`cp -a` of the tree in"},
		{"tar x", "`tar -xf` of a tarball of the tree"},
		{"git clone", "`git clone --no-hardlinks file://…` of a repository of the tree, one commit"},
		{"ls -lR", "`ls -lR` of the copied tree"},
		{"grep -r", fmt.Sprintf("`grep -r %s` of the copied tree", grepWord)},
		{"rm -rf", "`rm -rf` of the copied tree"},
		{"rm -rf clone", "`rm -rf` of the clone (its .git included)"},
	}
	reps := [3]int{}
	side := func(k int, root string) func() []time.Duration {
		return func() []time.Duration {
			reps[k]++
			dir := filepath.Join(root, fmt.Sprintf("tools-%d", reps[k]))
			for _, d := range []string{dir, filepath.Join(dir, "tar")} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			took := []time.Duration{
				run(t, dir, "cp", "-a", tree, "cp"),
				run(t, dir, "tar", "-xf", tarball, "-C", "tar"),
				run(t, dir, "git", "clone", "-q", "--no-hardlinks", "file://"+repo, "clone"),
				run(t, dir, "ls", "-lR", "cp"),
				run(t, dir, "grep", "-r", grepWord, "cp"),
				run(t, dir, "rm", "-rf", "cp"),
				run(t, dir, "rm", "-rf", "clone"),
			}
			// Untimed: the tarball's copy and the directory itself.
			run(t, root, "rm", "-rf", dir)
			return took
		}
	}
	res := rounds(s.reps, side(0, esfs), side(1, juice), side(2, loop))
	for i, st := range steps {
		s.addPeer(peerRow{name: st.name, workload: fmt.Sprintf("%s (Go's src/{%s}: %d entries)", st.workload, strings.Join(dirs, ","), entries),
			esfs: column(res[0], i), juice: column(res[1], i), loop: column(res[2], i), target: "≥ 1 (aim 3)", atLeast: 1})
	}
}
