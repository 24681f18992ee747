package test

// Write-behind under faults (fs/vfs/writeback.go, fs/vfs/errseq.go): a batch whose
// stage lands but whose answer is lost is rolled back and tried again, and
// nothing close or fsync acknowledged is replaced by zeros or dropped; a
// batch that can never land (its mount was declared dead) is reported to
// every open file description it touched, at fsync and at close, and never
// as success for a file that exists nowhere.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// stageBulk matches a batch's stage: the bulk that writes its names with
// their intent.
var stageBulk = mounttest.BulkTo("", `"role":"dst"`)

// recordBulk matches a batch's first request: its record, created
// PREPARED, and the marks of its delegations.
var recordBulk = mounttest.BulkTo("-locks", `"state":"prepared"`)

// abortWrite matches the write of an operation record going ABORTED, the
// first step of a rollback.
func abortWrite(method, path string, body []byte) bool {
	return recordWrite(method, path, body, `"state":"aborted"`)
}

// fenceWrite matches the write that fences a batch off: its record,
// created or set DONE and aborted.
func fenceWrite(method, path string, body []byte) bool {
	return recordWrite(method, path, body, `"state":"done"`, `"aborted":true`)
}

func recordWrite(method, path string, body []byte, has ...string) bool {
	if method != http.MethodPut || !strings.Contains(path, "-locks"+store.WriteAliasSuffix+"/_doc/") {
		return false
	}
	for _, h := range has {
		if !bytes.Contains(body, []byte(h)) {
			return false
		}
	}
	return true
}

// fsyncPath opens path and fsyncs it, as sync(1) FILE does.
func fsyncPath(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Sync()
}

// TestWriteBackFileSurvivesRollback: a file made in memory in a
// write-delegated directory is copied with cp while Elasticsearch hiccups
// on the batch that makes it: the stage lands but its answer is lost, so
// the batch is rolled back and tried again; the rollback itself may fail,
// or fail after its first step, which leaves the outcome to be learnt
// later; or the batch's record lands unanswered and the write that
// fences it off is lost. Once fsync has said so, A is killed -9: what
// fsync acknowledged must be on another mount, byte for byte, also once
// A's leftovers are recovered: never the file's size filled with zeros,
// never no file. A file of 20 MiB is more than a batch holds (its bytes
// cannot travel in the stage); one of 4 MiB goes in the stage.
func TestWriteBackFileSurvivesRollback(t *testing.T) {
	stageLost := func() *mounttest.Fault { return &mounttest.Fault{Match: stageBulk, Reset: true} }
	cases := []struct {
		name string
		size int
		// faults: the first must land (its answer is lost).
		faults []*mounttest.Fault
	}{
		{name: "stage answer lost", size: 20 << 20, faults: []*mounttest.Fault{stageLost()}},
		// The rollback's record write never arrives: the record stays
		// PREPARED, the outcome unknown; the owner settles it later.
		{name: "rollback lost", size: 20 << 20, faults: []*mounttest.Fault{stageLost(), {Match: abortWrite, Drop: true}}},
		{name: "held data, rollback lost", size: 4 << 20, faults: []*mounttest.Fault{stageLost(), {Match: abortWrite, Drop: true}}},
		// It lands but its answer is lost: the record is ABORTED, its
		// rollback unfinished, and it is still this mount's own batch.
		{name: "rollback answer lost", size: 20 << 20, faults: []*mounttest.Fault{stageLost(), {Match: abortWrite, Reset: true}}},
		// The record lands unanswered, PREPARED, and is not fenced off:
		// left so, A's recovery would roll it back after the next try
		// landed the same file.
		{name: "record answer lost, fence lost", size: 4 << 20, faults: []*mounttest.Fault{{Match: recordBulk, Reset: true}, {Match: fenceWrite, Drop: true}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "big")
			data := mounttest.RandomBytes(int64(26+i), c.size)
			if err := os.WriteFile(src, data, 0o644); err != nil {
				t.Fatal(err)
			}
			f := mounttest.NewFS(t)
			fp := mounttest.NewFaultProxy(t, testenv.URL(t))
			a, _ := writerMount(t, f, nil, "--es-url", fp.URL)
			b := mounttest.MountUncached(t, f, nil)
			if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsyncPath(a.Path("d")); err != nil {
				t.Fatal(err)
			}
			for _, fault := range c.faults {
				fp.Add(fault)
			}
			first := c.faults[0]
			out, cpErr := exec.Command("cp", src, a.Path("d", "big")).CombinedOutput()
			if cpErr != nil {
				t.Errorf("cp: %v %s; one hiccup must not fail it", cpErr, out)
			}
			// fsync(1) as a careful user would: again if it failed.
			fsync1 := fsyncPath(a.Path("d", "big"))
			fsync2 := fsync1
			if fsync1 != nil {
				fsync2 = fsyncPath(a.Path("d", "big"))
			}
			t.Logf("REPORT %s: cp: %v; fsync: %s, then %s", t.Name(), cpErr, mounttest.Errno(fsync1), mounttest.Errno(fsync2))
			select {
			case <-first.Fired():
			case <-time.After(time.Minute):
				t.Fatal("no request met the first fault: the test provoked nothing")
			}
			if first.Status != 200 {
				t.Fatalf("the request whose answer was lost did not land: the cluster answered %d", first.Status)
			}
			if fsync2 != nil {
				t.Fatalf("fsync failed twice (%v, %v); one hiccup must not fail it", fsync1, fsync2)
			}
			if strings.Contains(a.Log(), "batch was lost") {
				t.Errorf("A lost a batch with no mount cut off:\n%s", a.Log())
			}
			// What fsync returned is durable: A's memory is not needed.
			sess := mounttest.Session(t, f, a).ID
			a.Kill()
			check := func(when string) {
				t.Helper()
				got, err := os.ReadFile(b.Path("d", "big"))
				switch {
				case err != nil:
					t.Fatalf("%s: the copy fsync acknowledged on A is missing on B: %v", when, err)
				case len(got) != c.size:
					t.Fatalf("%s: B reads %d bytes; want %d", when, len(got), c.size)
				case !bytes.Equal(got, data):
					zeros := bytes.Count(got, []byte{0})
					t.Fatalf("%s: B reads other bytes than were copied (%d of %d are zero): acknowledged data was lost", when, zeros, c.size)
				}
			}
			check("after A's death")
			waitSettled(t, f, sess, mounttest.RecoveredWithin+30*time.Second)
			check("after A's leftovers were recovered")
			mounttest.FsckCleanAfterCrash(t, f, mounttest.RecoveredWithin+30*time.Second)
		})
	}
}

// TestWriteBackChangeWhileOutcomeUnknown: a batch's stage lands but its
// answer is lost, its rollback is lost too, and the record that would
// tell its outcome cannot be read until fsync's deadline: fsync fails,
// and the batch's outcome stays unknown. A chmod of the file it makes must
// then learn the outcome and go on (the batch was rolled back: it lands
// now), not fail; and what the next fsync acknowledges survives A's death.
func TestWriteBackChangeWhileOutcomeUnknown(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a, _ := writerMount(t, f, nil, "--es-url", fp.URL, "--es-timeout=4s", "--lock-timeout=1s")
	b := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsyncPath(a.Path("d")); err != nil {
		t.Fatal(err)
	}
	data := mounttest.RandomBytes(27, 1<<20)
	if err := os.WriteFile(a.Path("d", "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var unreadable atomic.Bool
	unreadable.Store(true)
	stage := fp.Add(&mounttest.Fault{Match: stageBulk, Reset: true})
	fp.Add(&mounttest.Fault{Match: abortWrite, Drop: true})
	for i := 0; i < 1000; i++ {
		fp.Add(&mounttest.Fault{Drop: true, Match: func(method, path string, _ []byte) bool {
			return unreadable.Load() && method == http.MethodGet && strings.Contains(path, "-locks/_doc/O")
		}})
	}
	fsyncErr := fsyncPath(a.Path("d", "f"))
	unreadable.Store(false)
	stage.WaitFired(t)
	if fsyncErr == nil {
		t.Fatal("fsync succeeded although its batch's outcome could not be learnt")
	}
	err := os.Chmod(a.Path("d", "f"), 0o600)
	t.Logf("REPORT %s: fsync while the outcome could not be learnt: %s; chmod after: %s", t.Name(), mounttest.Errno(fsyncErr), mounttest.Errno(err))
	if err != nil {
		t.Fatalf("chmod of a file whose batch's outcome was unknown: %v; it must learn the outcome and go on", err)
	}
	if err := fsyncPath(a.Path("d", "f")); err != nil {
		t.Fatalf("fsync after the outcome was learnt: %v", err)
	}
	a.Kill()
	got, err := os.ReadFile(b.Path("d", "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("B reads d/f: %d bytes (%v); want the %d bytes written", len(got), err, len(data))
	}
	if st, err := os.Stat(b.Path("d", "f")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("B stats d/f: %v, %v; want mode 0600", st, err)
	}
	mounttest.FsckCleanAfterCrash(t, f, mounttest.RecoveredWithin+30*time.Second)
}

// waitSettled waits until every operation record of session sess is
// settled (DONE): a dead mount's are recovered by the others.
func waitSettled(t *testing.T, f *mounttest.FS, sess string, limit time.Duration) {
	t.Helper()
	mounttest.WaitFor(t, "the dead mount's operations settled", limit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		recs, err := f.Store.SearchOps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if strings.HasPrefix(r.ID, sess+"-") && r.State != store.OpDone {
				return false
			}
		}
		return true
	})
}

// descriptorHolder is a process that holds descriptors on a mount and
// makes the calls it is told, one per line: "open NAME PATH [create]",
// "write NAME TEXT", "fsync NAME", "close NAME", "pread NAME" (from the
// start); it answers "ok" (a pread "data TEXT") or "errno N". A separate process: a descriptor this test process held on
// a frozen mount would hang every fork it makes (the child's close-on-exec
// flushes through the frozen daemon).
type descriptorHolder struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    *bufio.Writer
	lines chan string
}

const holderScript = `
import os, sys
fds = {}
for line in sys.stdin:
    w = line.split()
    try:
        if w[0] == "open":
            flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if w[3:] == ["create"] else 0)
            fds[w[1]] = os.open(w[2], flags, 0o644)
        elif w[0] == "write":
            os.write(fds[w[1]], w[2].encode())
        elif w[0] == "fsync":
            os.fsync(fds[w[1]])
        elif w[0] == "close":
            os.close(fds.pop(w[1]))
        elif w[0] == "pread":
            print("data", os.pread(fds[w[1]], 1 << 16, 0).decode(errors="replace"), flush=True)
            continue
        print("ok", flush=True)
    except OSError as e:
        if w[0] == "close":
            fds.pop(w[1], None)
        print("errno", e.errno, flush=True)
`

func startHolder(t *testing.T) *descriptorHolder {
	t.Helper()
	cmd := exec.Command("python3", "-c", holderScript)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &descriptorHolder{t: t, cmd: cmd, in: bufio.NewWriter(in), lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return h
}

// do makes one call and returns its answer: "ok" or "errno N".
func (h *descriptorHolder) do(format string, args ...any) string {
	h.t.Helper()
	line := fmt.Sprintf(format, args...)
	fmt.Fprintln(h.in, line)
	if err := h.in.Flush(); err != nil {
		h.t.Fatalf("%s: %v", line, err)
	}
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("%s: the holder ended", line)
		}
		return l
	case <-time.After(2 * time.Minute):
		h.t.Fatalf("%s: no answer within 2 minutes", line)
	}
	return ""
}

func (h *descriptorHolder) must(format string, args ...any) {
	h.t.Helper()
	if got := h.do(format, args...); got != "ok" {
		h.t.Fatalf("%s: %s", fmt.Sprintf(format, args...), got)
	}
}

var eio = fmt.Sprintf("errno %d", syscall.EIO)

// TestWriteBackLostBatchReportedToEveryDescriptor: two processes on A each
// create and write a file in memory; a third holds two open file
// descriptions of a file A fsynced before. A is frozen past its lease and
// declared dead, so its pending batch can never land. Woken, every one of
// them hears of it (Linux's errseq): the two files exist nowhere, so every
// fsync and close of theirs fails with EIO, never success; each of the
// third's descriptions gets EIO at its next fsync, once.
func TestWriteBackLostBatchReportedToEveryDescriptor(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := writerMount(t, f, nil, "--lease=1s")
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.Path("d", "synced"), []byte("synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsyncPath(a.Path("d", "synced")); err != nil {
		t.Fatal(err)
	}
	p1, p2, p3 := startHolder(t), startHolder(t), startHolder(t)
	p1.must("open f %s create", a.Path("d", "one"))
	p1.must("write f first")
	p2.must("open f %s create", a.Path("d", "two"))
	p2.must("write f second")
	p3.must("open x %s", a.Path("d", "synced"))
	p3.must("open y %s", a.Path("d", "synced"))

	a.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	b := mounttest.MountUncached(t, f, nil)
	// B's look waits for A's recall, then for A to be declared dead.
	if got := listing(b.Path("d")); strings.Join(got, " ") != "synced" {
		t.Fatalf("B lists %q while A is frozen; want only what A fsynced", got)
	}
	a.Signal(syscall.SIGCONT)

	calls := []struct {
		p          *descriptorHolder
		call, want string
	}{
		{p1, "fsync f", eio},
		{p2, "fsync f", eio},
		// Still nowhere: never success.
		{p1, "fsync f", eio},
		{p1, "write f more", "ok"}, // buffered, as Linux buffers it
		{p1, "close f", eio},
		{p2, "close f", eio},
		// Touched by nothing but the loss of A's batch: told once per
		// open file description, at fsync.
		{p3, "fsync x", eio},
		{p3, "fsync x", "ok"},
		{p3, "fsync y", eio},
		{p3, "close y", "ok"},
		{p3, "close x", "ok"},
	}
	var report []string
	failed := false
	for _, c := range calls {
		got := c.p.do("%s", c.call)
		proc := map[*descriptorHolder]string{p1: "p1", p2: "p2", p3: "p3"}[c.p]
		report = append(report, fmt.Sprintf("%s %s: %s", proc, c.call, got))
		if got != c.want {
			failed = true
			t.Errorf("%s %s: %s; want %s", proc, c.call, got, c.want)
		}
	}
	t.Logf("REPORT %s: %s", t.Name(), strings.Join(report, "; "))
	if failed {
		t.Logf("A's log:\n%s", a.Log())
	}
	for _, m := range []*mounttest.Mount{a, b} {
		if got := listing(m.Path("d")); strings.Join(got, " ") != "synced" {
			t.Errorf("%s lists %q; want only what A fsynced", m.Dir, got)
		}
	}
}

// TestWritesBufferedBeforeDeathAreLost (campaign seed 720786204, class
// lost-unreported): a process writes to a stored file through mount A
// (buffered until close) and A is frozen past its lease; another mount
// declares it dead. Woken, A starts a new session, and the write, made
// under the dead one, must not land under the new one: other mounts have
// judged it lost at A's death (what survives a dead mount is what it sent
// before). Before, the close sent it and returned 0; now the close fails
// with EIO and the file stays as it was. Closed at once on waking (campaign
// seed 78857218), the close began before A learned of its death, and its
// chunk went out under the new session that the generation's allocation
// started meanwhile, landed, and the close said EIO all the same.
func TestWritesBufferedBeforeDeathAreLost(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil, "--lease=1s")
	b := mounttest.MountUncached(t, f, nil, "--lease=1s")
	for _, tc := range []struct {
		name        string
		waitSession bool // close once A started its new session
	}{
		{"closed after A's new session", true},
		{"closed at once on waking", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			if err := os.WriteFile(a.Path(name), []byte("synced"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := fsyncPath(a.Path(name)); err != nil {
				t.Fatal(err)
			}
			p := startHolder(t)
			p.must("open f %s", a.Path(name))
			p.must("write f LOST")
			sess := mounttest.Session(t, f, a)
			started := strings.Count(a.Log(), "started a new session")
			a.Signal(syscall.SIGSTOP)
			t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
			mounttest.WaitFor(t, "A declared dead", time.Minute, func() bool {
				_, _ = os.Stat(b.Path(name))
				for _, s := range mounttest.Sessions(t, f) {
					if s.ID == sess.ID {
						return s.Dead
					}
				}
				return true // removed: dead and collected
			})
			if got := mounttest.MustReadFile(t, b.Path(name)); string(got) != "synced" {
				t.Fatalf("B reads %q while A is frozen; want what A fsynced", got)
			}
			a.Signal(syscall.SIGCONT)
			if tc.waitSession {
				mounttest.WaitFor(t, "A's new session", time.Minute, func() bool {
					return strings.Count(a.Log(), "started a new session") > started
				})
			}
			if got := p.do("close f"); got != eio {
				t.Errorf("close of a file whose write was buffered under A's dead session: %s, want %s", got, eio)
			}
			time.Sleep(2 * time.Second) // a late write would land by now
			for _, m := range []*mounttest.Mount{a, b} {
				if got := mounttest.MustReadFile(t, m.Path(name)); string(got) != "synced" {
					t.Errorf("%s reads %q after A woke; want what A fsynced before its death", m.Path(name), got)
				}
			}
		})
	}
}
