package test

// Which esfs runs where: esfs --version, the mount's log and metrics, and
// esfs status.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// git runs git in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// goBuild builds esfs from the source tree dir into out, with extra flags.
// -buildvcs=true overrides a GOFLAGS=-buildvcs=false of the environment.
func goBuild(t *testing.T, dir, out string, extra ...string) {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"build", "-buildvcs=true", "-o", out}, extra...), ".")...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", dir, err, b)
	}
}

// stampedRevision is the VCS revision the Go toolchain recorded in bin
// (with "+dirty" when it recorded changes), or "" if none.
func stampedRevision(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	var rev string
	dirty := false
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		}
		if len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true" {
			dirty = true
		}
	}
	if rev != "" && dirty {
		rev += "+dirty"
	}
	return rev
}

func versionOf(t *testing.T, bin string) string {
	t.Helper()
	r := mounttest.Run(t, mounttest.Cmd{Bin: bin, Args: []string{"--version"}, Limit: time.Minute})
	if r.Err != nil {
		t.Fatalf("esfs --version: %v\n%s", r.Err, r.Out)
	}
	return strings.TrimSpace(r.Out)
}

// TestVersion: esfs --version names the commit it was built from, with
// +dirty for a tree with changes, and the -X value wins over the
// module's version. The binary the tests run is built with go build from
// this tree, which records the commit only in a git checkout whose .git is
// a directory (not in a worktree, nor with -buildvcs=false): it is checked
// against the tree when it has one. The commit is then checked on a build
// from a clone of this tree's HEAD, which always has one.
func TestVersion(t *testing.T) {
	root := mounttest.RepoRoot()
	head := git(t, root, "rev-parse", "HEAD")
	line := regexp.MustCompile(`^esfs version (\S+) \((revision (\S+) of \S+|revision unknown), (go\S+)\)$`)

	bin := mounttest.Binary(t)
	got := versionOf(t, bin)
	m := line.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("esfs --version of the test binary: %q does not match %s", got, line)
	}
	if rev := stampedRevision(t, bin); rev != "" {
		want := head
		if git(t, root, "status", "--porcelain") != "" {
			want += "+dirty"
		}
		if m[3] != want || rev != want {
			t.Errorf("test binary: esfs --version says revision %q, go version -m %q; the tree is at %s", m[3], rev, want)
		}
	} else {
		if m[2] != "revision unknown" {
			t.Errorf("test binary without a VCS stamp: esfs --version says %q", got)
		}
		t.Logf("the test binary has no VCS stamp (a git worktree, or GOFLAGS=-buildvcs=false): %s", got)
	}

	// A checkout of HEAD: its revision, clean, then dirty.
	src := filepath.Join(t.TempDir(), "esfs")
	git(t, root, "clone", "--quiet", "--shared", "--no-checkout", root, src)
	git(t, src, "checkout", "--quiet", head)
	built := filepath.Join(t.TempDir(), "esfs")
	goBuild(t, src, built)
	got = versionOf(t, built)
	if m := line.FindStringSubmatch(got); m == nil || m[3] != head || !strings.HasPrefix(m[1], "v0.0.0-") || !strings.Contains(m[1], head[:12]) {
		t.Errorf("built from a clean checkout of %s: %q (want that revision, and its pseudo-version)", head, got)
	}
	if err := os.WriteFile(filepath.Join(src, "uncommitted.txt"), []byte("a change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goBuild(t, src, built)
	if got = versionOf(t, built); !strings.Contains(got, "revision "+head+"+dirty of ") {
		t.Errorf("built from a checkout with changes: %q, want revision %s+dirty", got, head)
	}
	goBuild(t, src, built, "-ldflags", "-X github.com/esfs/esfs/cmd.Version=9.9.9-test")
	if got = versionOf(t, built); !strings.HasPrefix(got, "esfs version 9.9.9-test (revision "+head+"+dirty of ") {
		t.Errorf("built with -X cmd.Version=9.9.9-test: %q", got)
	}
}

// TestStatusShowsMounts: a mount names its build in its first log line,
// in the esfs_build_info gauge and in its session document; esfs status
// shows each mount's version and options, and "?" for a mount whose
// document predates them.
func TestStatusShowsMounts(t *testing.T) {
	f := mounttest.NewFS(t)
	addr := mounttest.FreeAddr(t)
	want := versionOf(t, f.Bin)
	version := strings.Fields(want)[2]
	m := f.Mount(t, "--metrics-addr", addr, "--read-only", "--delegations=false", "--lease", "3s", "--cache-ttl", "250ms", "--locking", "document")

	mounted := regexp.MustCompile(`msg=mounted .*version=` + regexp.QuoteMeta(version))
	if !mounted.MatchString(m.Log()) {
		t.Errorf("the mounted log line does not name version %s:\n%s", version, m.Log())
	}
	fams := mounttest.Scrape(t, "http://"+addr+"/metrics")
	if v := mounttest.Sample(fams, "esfs_build_info", "version", version); v != 1 {
		t.Errorf("esfs_build_info{version=%q} = %v, want 1", version, v)
	}
	if fam := fams["esfs_build_info"]; fam == nil || len(fam.GetMetric()) != 1 {
		t.Errorf("esfs_build_info: want one series, got %v", fam)
	} else {
		labels := map[string]string{}
		for _, l := range fam.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["goversion"] == "" || !strings.Contains(want, labels["goversion"]) || !strings.Contains(want, "revision "+orUnknownRev(labels["revision"])) {
			t.Errorf("esfs_build_info labels %v disagree with esfs --version %q", labels, want)
		}
	}

	// A session of an older mount, which recorded neither.
	old := store.SessionDoc{ID: "0ld5e55i0n000000", Host: "elsewhere", Pid: 42, Mount: "/old/mount", Started: time.Now().UnixNano(), LeaseMs: 10000, DoneBelow: 1}
	if _, err := f.Store.Write(context.Background(), store.CreateSession(old)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.Store.Write(context.Background(), store.DeleteSession(old.ID, store.Version{}))
	})

	out, err := f.Run("status")
	if err != nil {
		t.Fatalf("esfs status: %v\n%s", err, out)
	}
	t.Logf("esfs status:\n%s", out)
	row := regexp.MustCompile(`(?m)^\S+\s+registered\s+\S+\s+\d+\s+` + regexp.QuoteMeta(m.Dir) + `\s+` + regexp.QuoteMeta(version) + `\s+3s\s+\d+$`)
	if !row.MatchString(out) {
		t.Errorf("status has no row for %s with version %s", m.Dir, version)
	}
	if !regexp.MustCompile(`(?m)^0ld5e55i0n000000\s+registered\s+elsewhere\s+42\s+/old/mount\s+\?\s+10s\s+0$`).MatchString(out) {
		t.Errorf("status does not show the older mount's version as ?")
	}
	options := "options read-only=true delegations=false write-delegations=false locking=document lease=3s lock-timeout=30s cache-ttl=250ms"
	if !strings.Contains(out, "  esfs "+want[len("esfs version "):]+"\n  "+options) {
		t.Errorf("status does not show the mount's build and options %q", options)
	}
	if !strings.Contains(out, "0ld5e55i0n000000 (/old/mount on elsewhere)\n  esfs ?\n  options ?\n") {
		t.Errorf("status does not show ? for the older mount's build and options")
	}
}

// orUnknownRev is how esfs --version spells an empty revision label.
func orUnknownRev(rev string) string {
	if rev == "" {
		return "unknown"
	}
	return rev
}
