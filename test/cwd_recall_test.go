package test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// startReadyIn starts argv with working directory dir, its standard
// input and output piped (its errors discarded), and returns them once it
// printed "ready": from then on its working directory is dir.
func startReadyIn(t *testing.T, dir string, argv ...string) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewReader(outPipe)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("%s in %s: %q, %v", argv[0], dir, line, err)
	}
	return in, out
}

// cwdShell is a process whose working directory is dir, which answers
// each pwd with what getcwd names, or its error.
type cwdShell struct {
	in  io.WriteCloser
	out *bufio.Reader
}

// startCwdShell starts a cwdShell in dir. Python's getcwd is the system
// call's: coreutils' pwd, when getcwd fails, walks ".." up itself and
// finds the path anyway.
func startCwdShell(t *testing.T, dir string) *cwdShell {
	t.Helper()
	in, out := startReadyIn(t, dir, "python3", "-c", `
import os, sys
print("ready", flush=True)
for _ in sys.stdin:
    try:
        print(os.getcwd())
    except OSError as e:
        print(e)
    print(".", flush=True)
`)
	return &cwdShell{in: in, out: out}
}

// pwd is what the process's getcwd answers.
func (s *cwdShell) pwd(t *testing.T) string {
	t.Helper()
	if _, err := io.WriteString(s.in, "\n"); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		line, err := s.out.ReadString('\n')
		if err != nil {
			t.Fatalf("the process: %v (after %q)", err, lines)
		}
		if line == ".\n" {
			return strings.Join(lines, "")
		}
		lines = append(lines, line)
	}
}

// TestWorkingDirectoryOutlivesRecalls: a process whose working directory
// is a directory this mount told the kernel of under a delegation keeps a
// working directory that getcwd names when another mount's changes
// recall the delegation, and when the mount sheds the directory's names
// (--names-kept). The kernel is made to ask again about the names, not to
// drop them (fs/expire.go): dropped, the directory is unhashed and getcwd
// fails with ENOENT, as esfs find's "getwd: no such file or directory"
// did in TestFindDiff on a loaded machine. The process's working directory
// was reached through d's delegation (its chdir looked "sub" up in d), so
// the names recalled or shed include it.
func TestWorkingDirectoryOutlivesRecalls(t *testing.T) {
	const dirs, files, kept = 4, 400, 1000
	src := t.TempDir()
	for d := 0; d < dirs; d++ {
		dir := filepath.Join(src, fmt.Sprintf("big%d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < files; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	a, am := delegMount(t, f, "--names-kept", fmt.Sprint(kept), "--lease", "60s")
	if strings.Contains(a.Log(), "the kernel cannot expire a name") {
		t.Skip("this kernel drops names it is told to forget (FUSE_EXPIRE_ONLY needs Linux 6.2): a cwd there fails getcwd after a recall, as the README says")
	}
	b, _ := delegMount(t, f)
	cwd := a.Path("t", "d", "sub")
	// holdD waits for A to hold delegations on /, t, d and sub (none on
	// the big directories yet), then has the kernel told sub under d's:
	// a stat after the grant asks A again unless the kernel already keeps
	// sub, which it keeps only under d's delegation.
	holdD := func() {
		t.Helper()
		waitDelegated(t, am, 4, func() { names(t, a.Path("t", "d")); names(t, cwd) })
		if _, err := os.Stat(cwd); err != nil {
			t.Fatal(err)
		}
	}
	holdD()
	sh := startCwdShell(t, cwd)
	if got := sh.pwd(t); got != cwd+"\n" {
		t.Fatalf("getcwd before any change: %q, want %q", got, cwd)
	}

	t.Run("recalls", func(t *testing.T) {
		for round := 0; round < 4; round++ {
			x := fmt.Sprintf("x%d", round)
			// Each change of d on B recalls A's delegation on d (taken
			// again by A's listing in between).
			if err := os.WriteFile(b.Path("t", "d", x), []byte(x), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := names(t, a.Path("t", "d")); !strings.Contains(strings.Join(got, " "), x) {
				t.Fatalf("round %d: A lists %q after B made %s", round, got, x)
			}
			if got := sh.pwd(t); got != cwd+"\n" {
				t.Fatalf("round %d: getcwd after B made %s in the working directory's parent: %q, want %q", round, x, got, cwd)
			}
			if err := os.Rename(b.Path("t", "d", x), b.Path("t", "d", x+"-moved")); err != nil {
				t.Fatal(err)
			}
			if got := sh.pwd(t); got != cwd+"\n" {
				t.Fatalf("round %d: getcwd after B renamed %s beside the working directory: %q, want %q", round, x, got, cwd)
			}
			holdD()
		}
	})

	t.Run("names shed", func(t *testing.T) {
		metric := func(name string) float64 { return mounttest.Sample(mounttest.Scrape(t, am), name) }
		before := metric("esfs_delegation_names_shed_total")
		// d was used last before the big directories: used less
		// recently than they are, so shed before them.
		holdD()
		deadline := time.Now().Add(2 * time.Minute)
		for metric("esfs_delegation_names_shed_total")-before < 2*files {
			if time.Now().After(deadline) {
				t.Fatalf("after listing %d directories of %d with --names-kept %d, %v names were shed", dirs, files, kept, metric("esfs_delegation_names_shed_total")-before)
			}
			for d := 0; d < dirs; d++ {
				if out, err := exec.Command("ls", "-l", a.Path("t", fmt.Sprintf("big%d", d))).CombinedOutput(); err != nil {
					t.Fatalf("ls -l: %v\n%s", err, out)
				}
			}
		}
		if got := sh.pwd(t); got != cwd+"\n" {
			t.Fatalf("getcwd after the mount shed names: %q, want %q", got, cwd)
		}
	})
}
