package test

// A filesystem's life after mkfs: esfs destroy (refused while mounted,
// after a crash once the lease runs out, on no terminal without --yes),
// esfs config, and what esfs does with indices of another format, of
// nobody's format, or a filesystem half made.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// TestDestroy: destroy refuses while a mount is live, naming it; refuses
// without --yes when there is no terminal to confirm on; once unmounted it
// deletes every index, and mount then says the filesystem does not exist.
func TestDestroy(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "--lease", "2s")
	out, code := mounttest.RunOn(t, f, "", "destroy", "--yes")
	if code != 1 || !strings.Contains(out, "is mounted") || !strings.Contains(out, m.Dir) || !strings.Contains(out, fmt.Sprintf("pid %d", m.Pid())) {
		t.Fatalf("destroy of a mounted filesystem: status %d, want 1 and a message naming the mount %s (pid %d):\n%s", code, m.Dir, m.Pid(), out)
	}
	mounttest.Sh(t, m.Dir, `echo still > here && test "$(cat here)" = still`)

	// exec gives the command /dev/null for standard input: no terminal.
	// That is said at once, before watching the mounts.
	out, code = mounttest.RunOn(t, f, "", "destroy")
	if code != 2 || !strings.Contains(out, "--yes") || strings.Contains(out, "watching") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("destroy without a terminal or --yes: status %d, want 2 and one line saying --yes:\n%s", code, out)
	}
	m.Unmount(t)
	if got := existing(t, f); len(got) != 5 {
		t.Fatalf("after the refusals, indices %v, want all five", got)
	}

	out, code = mounttest.RunOn(t, f, "", "destroy", "--yes")
	if code != 0 || !strings.Contains(out, "destroyed") {
		t.Fatalf("destroy after unmount: status %d:\n%s", code, out)
	}
	if got := existing(t, f); len(got) != 0 {
		t.Fatalf("after destroy, indices %v remain", got)
	}
	out, code = mounttest.RunOn(t, f, "", "mount", t.TempDir())
	if code != 1 || !strings.Contains(out, "does not exist") || !strings.Contains(out, "esfs mkfs --index "+f.Index) {
		t.Fatalf("mount of a destroyed filesystem: status %d, want 1 saying it does not exist and how to make it:\n%s", code, out)
	}
	out, code = mounttest.RunOn(t, f, "", "destroy", "--yes")
	if code != 1 || !strings.Contains(out, "does not exist") {
		t.Fatalf("destroy of nothing: status %d, want 1:\n%s", code, out)
	}
}

// TestDestroyAfterCrash: a mount killed with SIGKILL leaves its session
// registered. destroy --no-wait refuses at once (it is not known dead);
// destroy watches its heartbeat stand still for its lease plus grace,
// declares it dead and deletes the filesystem.
func TestDestroyAfterCrash(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "--lease", "2s")
	mounttest.Sh(t, m.Dir, `echo x > f`)
	m.Kill()
	out, code := mounttest.RunOn(t, f, "", "destroy", "--yes", "--no-wait")
	if code != 1 || !strings.Contains(out, "not known to be dead") || !strings.Contains(out, m.Dir) {
		t.Fatalf("destroy --no-wait with a crashed mount: status %d, want 1 naming it:\n%s", code, out)
	}
	if got := existing(t, f); len(got) != 5 {
		t.Fatalf("after the refusal, indices %v, want all five", got)
	}
	out, code = mounttest.RunOn(t, f, "", "destroy", "--yes")
	if code != 0 || !strings.Contains(out, "destroyed") {
		t.Fatalf("destroy after a crash: status %d:\n%s", code, out)
	}
	if got := existing(t, f); len(got) != 0 {
		t.Fatalf("after destroy, indices %v remain", got)
	}
}

// TestDestroyConfirm: on a terminal destroy asks for the filesystem's
// name; a wrong answer destroys nothing, the name destroys it. script(1)
// gives the command a terminal.
func TestDestroyConfirm(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) is not installed")
	}
	f := mounttest.NewFS(t)
	answer := func(typed string) (string, error) {
		t.Helper()
		line := strings.Join([]string{f.Bin, "destroy", "--es-url", f.URL, "--index", f.Index}, " ")
		cmd := exec.Command("script", "-qec", line, "/dev/null")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mounttest.WaitFor(t, "the question", time.Minute, func() bool { return strings.Contains(out.String(), "name to go on:") })
		_, _ = io.WriteString(in, typed+"\n")
		err = cmd.Wait()
		return out.String(), err
	}
	out, err := answer("not-" + f.Index)
	if err == nil || !strings.Contains(out, "not destroyed") || len(existing(t, f)) != 5 {
		t.Fatalf("a wrong name: %v, indices %v:\n%s", err, existing(t, f), out)
	}
	out, err = answer(f.Index)
	if err != nil || !strings.Contains(out, "destroyed") || len(existing(t, f)) != 0 {
		t.Fatalf("the filesystem's name: %v, indices %v:\n%s", err, existing(t, f), out)
	}
}

// TestDestroyMountedMeanwhile: a mount that registers after destroy
// judged the mounts, before its block on new mounts is in place (the
// block request is held here until the mount is up), is found under the
// block: destroy refuses, naming it, and lifts the block; the mount works.
func TestDestroyMountedMeanwhile(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	reached, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	letGo := func() { released.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if strings.HasSuffix(r.URL.Path, "/_block/write") {
			once.Do(func() { close(reached) })
			<-release
		}
		return false
	})
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		r := mounttest.Run(t, mounttest.Cmd{Args: []string{"destroy", "--yes", "--es-url", fp.URL, "--index", f.Index, "--es-timeout", "2m"},
			Env: []string{"ELASTICSEARCH_URL="}, Limit: 2 * time.Minute, MayHang: true})
		done <- result{r.Out, r.Code}
	}()
	select {
	case <-reached:
	case r := <-done:
		t.Fatalf("destroy ended before blocking new mounts: status %d:\n%s", r.code, r.out)
	}
	m := f.Mount(t)
	letGo()
	r := <-done
	if r.code != 1 || !strings.Contains(r.out, "mounted meanwhile") || !strings.Contains(r.out, m.Dir) {
		t.Fatalf("destroy with a mount started meanwhile: status %d, want 1 naming it:\n%s", r.code, r.out)
	}
	infos, err := f.Store.Admin().Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if !i.Exists || i.WriteBlocked {
			t.Errorf("after the refusal, %s: exists %v, write blocked %v", i.Name, i.Exists, i.WriteBlocked)
		}
	}
	mounttest.Sh(t, m.Dir, `echo alive > f && test "$(cat f)" = alive`)
	mounttest.Alive(t, m)
}

// TestDestroyInterrupted: a destroy that died after blocking new mounts
// (the block is set here by hand) leaves a filesystem that mounts refuse,
// saying so and what to do; config --unblock keeps it.
func TestDestroyInterrupted(t *testing.T) {
	f := mounttest.NewFS(t)
	mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "PUT", "/"+f.Index+"-sessions/_block/write", "")
	out, code := mounttest.RunOn(t, f, "", "mount", t.TempDir())
	if code != 1 || !strings.Contains(out, "being destroyed") || !strings.Contains(out, "--unblock") {
		t.Fatalf("mount while new mounts are blocked: status %d, want 1 saying why and what to do:\n%s", code, out)
	}
	out, code = mounttest.RunOn(t, f, "", "config", "--unblock")
	if code != 0 || strings.Contains(out, "blocked") {
		t.Fatalf("config --unblock: status %d:\n%s", code, out)
	}
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `echo kept > f`)
}

// TestConfig: config prints the settings and changes replicas and the
// refresh interval on every index, as Elasticsearch then reports them;
// mkfs on the existing filesystem changes nothing and says so.
func TestConfig(t *testing.T) {
	f := mounttest.NewFS(t)
	out, code := mounttest.RunOn(t, f, "", "config")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("format %d", store.FormatVersion)) || !strings.Contains(out, "chunk size 1048576") || !strings.Contains(out, f.Index+"-sessions") || !strings.Contains(out, "0-1") {
		t.Fatalf("config: status %d:\n%s", code, out)
	}
	out, code = mounttest.RunOn(t, f, "", "config", "--replicas", "0", "--refresh-interval", "3s")
	if code != 0 || strings.Count(out, "3s") != 5 {
		t.Fatalf("config --replicas 0 --refresh-interval 3s: status %d, want the five indices printed with 3s:\n%s", code, out)
	}
	for idx, s := range settings(t, f) {
		if s.Replicas != "0" || s.AutoExpand != "false" || s.Refresh != "3s" {
			t.Errorf("%s after config: %+v, want 0 replicas (auto expansion off), refresh 3s", idx, s)
		}
	}
	if _, code = mounttest.RunOn(t, f, "", "config", "--replicas", "0-all"); code != 0 {
		t.Fatalf("config --replicas 0-all: status %d", code)
	}
	for idx, s := range settings(t, f) {
		if s.AutoExpand != "0-all" || s.Refresh != "3s" {
			t.Errorf("%s after config --replicas 0-all: %+v", idx, s)
		}
	}
	for _, bad := range [][]string{{"--replicas", "two"}, {"--refresh-interval", "-1"}, {"--refresh-interval", "0s"}} {
		out, code = mounttest.RunOn(t, f, "", append([]string{"config"}, bad...)...)
		if code != 2 || !strings.Contains(out, bad[0]) {
			t.Errorf("config %v: status %d, want 2 naming the flag:\n%s", bad, code, out)
		}
	}
	out, code = mounttest.RunOn(t, f, "", "mkfs", "--replicas", "1")
	if code != 0 || !strings.Contains(out, "changes no setting") || !strings.Contains(out, "esfs config") {
		t.Fatalf("mkfs --replicas 1 on an existing filesystem: status %d, want a note that nothing changed:\n%s", code, out)
	}
	if s := settings(t, f)[f.Index]; s.AutoExpand != "0-all" {
		t.Errorf("mkfs changed the replicas: %+v", s)
	}
}

// TestFormats: a filesystem made by a newer esfs is refused by mount,
// the admin commands, mkfs and destroy, saying to upgrade; an older format
// this esfs cannot upgrade is refused saying what to do; an index nobody
// made with esfs is never touched; a half-made filesystem says mkfs
// completes it and destroy removes it, and both do.
func TestFormats(t *testing.T) {
	f := mounttest.NewFS(t)
	setFormat := func(v any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"_meta": map[string]any{"esfs_format": v}})
		mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "PUT", "/"+f.Index+"-inodes/_mapping", string(b))
	}
	setFormat(store.FormatVersion + 1)
	newer := fmt.Sprintf("filesystem %s was made by a newer esfs (format %d; this esfs reads format %d)", f.Index, store.FormatVersion+1, store.FormatVersion)
	for _, args := range [][]string{{"mount", t.TempDir()}, {"status"}, {"fsck"}, {"config"}, {"mkfs"}, {"destroy", "--yes"}} {
		out, code := mounttest.RunOn(t, f, "", args...)
		if code != 1 || !strings.Contains(out, newer) || !strings.Contains(out, "upgrade") {
			t.Errorf("%s on a newer format: status %d, want 1 saying %q and to upgrade:\n%s", args[0], code, newer, out)
		}
	}
	setFormat(0)
	out, code := mounttest.RunOn(t, f, "", "mount", t.TempDir())
	if code != 1 || !strings.Contains(out, "made by an older esfs (format 0") || !strings.Contains(out, "esfs export") {
		t.Errorf("mount of an older format: status %d:\n%s", code, out)
	}
	setFormat(store.FormatVersion)
	if out, code := mounttest.RunOn(t, f, "", "config"); code != 0 {
		t.Fatalf("config after restoring the format: status %d:\n%s", code, out)
	}

	// Half made (or half deleted): one index missing.
	mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "DELETE", "/"+f.Index+"-locks", "")
	out, code = mounttest.RunOn(t, f, "", "mount", t.TempDir())
	if code != 1 || !strings.Contains(out, "incomplete") || !strings.Contains(out, f.Index+"-locks missing") ||
		!strings.Contains(out, "esfs mkfs --index "+f.Index) || !strings.Contains(out, "esfs destroy --index "+f.Index) {
		t.Errorf("mount of a half-made filesystem: status %d:\n%s", code, out)
	}
	out, code = mounttest.RunOn(t, f, "", "mkfs")
	if code != 0 || !strings.Contains(out, "made the missing index "+f.Index+"-locks") {
		t.Fatalf("mkfs of a half-made filesystem: status %d:\n%s", code, out)
	}
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `echo whole > f`)
	m.Unmount(t)
	mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "DELETE", "/"+f.Index+"-locks,"+f.Index+"-data", "")
	out, code = mounttest.RunOn(t, f, "", "destroy", "--yes")
	if code != 0 || len(existing(t, f)) != 0 {
		t.Fatalf("destroy of a half-made filesystem: status %d, left %v:\n%s", code, existing(t, f), out)
	}

	// An index of that name made by something else: never touched.
	mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "PUT", "/"+f.Index, `{"mappings":{"properties":{"title":{"type":"text"}}}}`)
	for _, args := range [][]string{{"mount", t.TempDir()}, {"mkfs"}, {"destroy", "--yes"}} {
		out, code := mounttest.RunOn(t, f, "", args...)
		if code != 1 || !strings.Contains(out, "index "+f.Index+" exists but has no esfs format") ||
			!strings.Contains(out, "never touches indices it did not make") || !strings.Contains(out, "choose another --index") {
			t.Errorf("%s on a foreign index: status %d:\n%s", args[0], code, out)
		}
	}
	if got := existing(t, f); len(got) != 1 || got[0] != f.Index {
		t.Errorf("after the refusals, indices %v, want the foreign one alone", got)
	}
}

// existing lists which of the filesystem's indices exist.
func existing(t *testing.T, f *mounttest.FS) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := f.Store.Admin().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		if i.Exists {
			out = append(out, i.Name)
		}
	}
	return out
}

type indexSettings struct {
	Replicas   string `json:"number_of_replicas"`
	AutoExpand string `json:"auto_expand_replicas"`
	Refresh    string `json:"refresh_interval"`
}

// settings reads the replicas and refresh interval of the filesystem's
// indices with GET _settings.
func settings(t *testing.T, f *mounttest.FS) map[string]indexSettings {
	t.Helper()
	b := mounttest.ESRequest(t, strings.Split(f.URL, ",")[0], "GET", "/"+f.Index+","+f.Index+"-*/_settings", "")
	var body map[string]struct {
		Settings struct {
			Index indexSettings `json:"index"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]indexSettings{}
	for idx, s := range body {
		out[idx] = s.Settings.Index
	}
	if len(out) != 5 {
		t.Fatalf("settings of %d indices, want 5: %s", len(out), b)
	}
	return out
}

// lockedBuffer is a bytes.Buffer that a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDestroyFrozenMountCreatesNoIndex: a mount frozen (SIGSTOP) across
// esfs destroy --yes, which declares it dead and deletes the indices, is
// woken: its heartbeat finds its session gone with them, the calls of a
// process that held a file open on it fail (a write, a truncation, a
// mkdir), and none of its writes makes Elasticsearch create an index of
// the filesystem again (store's TestNoWriteCreatesAnIndex tries every kind
// of write, chunk deletes with an external version included).
func TestDestroyFrozenMountCreatesNoIndex(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "--lease", "2s")
	mounttest.Sh(t, m.Dir, `echo hello > f; head -c 3000000 /dev/urandom > big`)
	// The file is held open by a process of its own: this one forks the
	// esfs commands, and a child closing a descriptor of the frozen mount
	// at exec would wait for it.
	holder := exec.Command("python3", "-c", `
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
print("open", flush=True)
sys.stdin.readline()
for what, call in (("write", lambda: os.pwrite(fd, b"late", 0)), ("ftruncate", lambda: os.ftruncate(fd, 0)), ("fsync", lambda: os.fsync(fd))):
    try:
        call()
        print(what, "ok", flush=True)
    except OSError as e:
        print(what, e.strerror, flush=True)
`, m.Path("big"))
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = holder.Wait() })
	held := bufio.NewReader(outPipe)
	if line, err := held.ReadString('\n'); line != "open\n" {
		t.Fatalf("the process holding big: %q, %v", line, err)
	}
	m.Signal(syscall.SIGSTOP)
	out, code := mounttest.RunOn(t, f, "", "destroy", "--yes")
	m.Signal(syscall.SIGCONT)
	if code != 0 || !strings.Contains(out, "destroyed") {
		t.Fatalf("destroy with a frozen mount: status %d, want 0 once it is declared dead:\n%s", code, out)
	}
	mounttest.WaitFor(t, "the woken mount's heartbeat to find its session lost", 2*time.Minute, func() bool {
		return strings.Contains(m.Log(), "session lost")
	})
	in.Write([]byte("go\n"))
	in.Close()
	rest, _ := io.ReadAll(held)
	// The write fails itself when it must read the chunk it writes into;
	// with that chunk kept from before, it is buffered, as a write into
	// the page cache of any filesystem is, and its loss is reported by the
	// fsync. Either way nothing is said to be stored that is not.
	calls := string(rest)
	lostUnsaid := strings.Contains(calls, "write ok") && strings.Contains(calls, "fsync ok")
	if strings.Contains(calls, "ftruncate ok") || lostUnsaid || strings.Count(calls, "\n") != 3 {
		t.Errorf("the calls through a descriptor of the destroyed filesystem: %q, want the truncation to fail, and the write or the fsync", rest)
	}
	if err := os.Mkdir(m.Path("d"), 0o755); err == nil {
		t.Errorf("mkdir on a destroyed filesystem succeeded")
	}
	if got := existing(t, f); len(got) != 0 {
		t.Fatalf("the woken mount's writes made Elasticsearch create %v again", got)
	}
	if !strings.Contains(m.Log(), "indices are gone") {
		t.Errorf("the woken mount does not say its filesystem is gone:\n%s", m.Log())
	}
}

// TestFormatUpgrade: a filesystem of format 1 (no write aliases, as the
// esfs before them made it) is refused by mount with what to run; esfs
// mkfs upgrades it in place, but not while a mount of it is live (one
// heartbeating here); an upgrade interrupted halfway (one index of the
// new format) is finished by the next mkfs; the filesystem then mounts
// with its data, every index of format 2 with its write alias.
func TestFormatUpgrade(t *testing.T) {
	f := mounttest.NewFS(t)
	base := strings.Split(f.URL, ",")[0]
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `mkdir -p d && echo kept > d/f`)
	m.Unmount(t)
	// A live mount of an older esfs: its session, heartbeating.
	live := store.SessionDoc{ID: "01d35e5510000000", Host: "elsewhere", Pid: 42, Mount: "/old/mount", Started: time.Now().UnixNano(), LeaseMs: 1000, DoneBelow: 1}
	if _, err := f.Store.Write(context.Background(), store.CreateSession(live)); err != nil {
		t.Fatal(err)
	}
	// Format 1, as the esfs before the write aliases left it.
	var actions []string
	for _, idx := range f.Store.Admin().Indices() {
		actions = append(actions, fmt.Sprintf(`{"remove":{"index":%q,"alias":%q}}`, idx, idx+store.WriteAliasSuffix))
		meta := `{"_meta":{"esfs_format":1}}`
		if strings.HasSuffix(idx, "-data") {
			meta = `{"_meta":{"esfs_format":1,"chunk_size":1048576}}`
		}
		mounttest.ESRequest(t, base, "PUT", "/"+idx+"/_mapping", meta)
	}
	mounttest.ESRequest(t, base, "POST", "/_aliases", `{"actions":[`+strings.Join(actions, ",")+`]}`)
	out, code := mounttest.RunOn(t, f, "", "mount", t.TempDir())
	if code != 1 || !strings.Contains(out, "older esfs (format 1") || !strings.Contains(out, "esfs mkfs --index "+f.Index) {
		t.Fatalf("mount of format 1: status %d, want 1 saying to run esfs mkfs:\n%s", code, out)
	}

	stop := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			body := fmt.Sprintf(`{"doc":{"counter":%d}}`, n)
			req, _ := http.NewRequest("POST", base+"/"+f.Index+"-sessions/_update/"+live.ID, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}
	}()
	out, code = mounttest.RunOn(t, f, "", "mkfs")
	close(stop)
	<-beating
	if code != 1 || !strings.Contains(out, "not upgraded") || !strings.Contains(out, "/old/mount") {
		t.Fatalf("mkfs of format 1 with a live mount: status %d, want 1 naming the mount:\n%s", code, out)
	}
	if out, code := mounttest.RunOn(t, f, "", "mount", t.TempDir()); code != 1 || !strings.Contains(out, "format 1") {
		t.Fatalf("mount after the refused upgrade: status %d, want the older format refused:\n%s", code, out)
	}

	// Interrupted after its first step of the format: only the path index
	// says 2.
	mounttest.ESRequest(t, base, "PUT", "/"+f.Index+"/_mapping", `{"_meta":{"esfs_format":2}}`)
	out, code = mounttest.RunOn(t, f, "", "mkfs")
	if code != 0 || !strings.Contains(out, "upgraded to format 2") {
		t.Fatalf("mkfs of a half-upgraded filesystem, its old mount gone: status %d:\n%s", code, out)
	}
	infos, err := f.Store.Admin().Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.Format != store.FormatVersion || !i.WriteAlias {
			t.Errorf("after the upgrade, index %s: format %d, write alias %v", i.Name, i.Format, i.WriteAlias)
		}
	}
	m = f.Mount(t)
	if got := strings.TrimSpace(mounttest.Sh(t, m.Dir, `cat d/f; echo more > d/g; cat d/g`)); got != "kept\nmore" {
		t.Errorf("the upgraded filesystem reads %q, want its data and a new file", got)
	}
}
