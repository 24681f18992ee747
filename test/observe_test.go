package test

// Watching a mount: the Prometheus metrics of --metrics-addr, and bad
// logging and metrics flags.

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestMetrics: --metrics-addr serves Prometheus metrics that count what the
// shell did (FUSE ops, Elasticsearch requests, cache, locks, renames), Go
// profiles with --pprof, and the same figures reach `esfs status` through
// the heartbeat.
func TestMetrics(t *testing.T) {
	f := mounttest.NewFS(t)
	addr := mounttest.FreeAddr(t)
	// Synchronous calls, whose requests and locks this test counts (the
	// TestWriteDelegations* tests count write delegations' batches), and
	// no read delegations either: a lookup a delegation answers never asks
	// the metadata cache, whose counters this test checks move (with them
	// it saw no cache lookup at all, now and then).
	m := f.Mount(t, "--metrics-addr", addr, "--pprof", "--lease", "2s", "--log-format", "json", "--delegations=false")
	mounttest.Sh(t, m.Dir, `mkdir d && echo hello > d/f && mv d/f d/g && ls -l d >/dev/null && cat d/g >/dev/null && ! cat d/missing 2>/dev/null`)
	fams := mounttest.Scrape(t, "http://"+addr+"/metrics")

	atLeast := func(what string, got, min float64) {
		t.Helper()
		if got < min {
			t.Errorf("%s = %v, want >= %v", what, got, min)
		}
	}
	for _, op := range []string{"MKDIR", "CREATE", "WRITE", "RENAME", "LOOKUP", "READDIRPLUS"} {
		atLeast("FUSE "+op, mounttest.Sample(fams, "esfs_fuse_request_duration_seconds", "op", op), 1)
	}
	atLeast("ES _bulk requests", mounttest.Sample(fams, "esfs_es_request_duration_seconds", "endpoint", "_bulk"), 3)
	atLeast("ES _doc requests", mounttest.Sample(fams, "esfs_es_request_duration_seconds", "endpoint", "_doc"), 1)
	atLeast("path documents written by bulk", mounttest.Sample(fams, "esfs_es_bulk_items_total", "index", "path"), 3)
	atLeast("data chunks written", mounttest.Sample(fams, "esfs_es_bulk_items_total", "index", "data"), 1)
	atLeast("cache lookups", mounttest.Sample(fams, "esfs_cache_hits_total")+mounttest.Sample(fams, "esfs_cache_misses_total"), 1)
	// The create in d and the rename took locks (mkdir at the root needs
	// none: only the shared locks of ancestors, and the root has none).
	atLeast("granted lock acquisitions", mounttest.Sample(fams, "esfs_lock_acquire_seconds", "result", "granted"), 2)
	// Creates keep their shared locks a moment (a lease, for the next
	// create in the directory), then give them back.
	for deadline := time.Now().Add(3 * time.Second); ; {
		held := mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_locks_held")
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("esfs_locks_held = %v 3 s after every operation ended, want 0", held)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := mounttest.Sample(fams, "esfs_renames_total", "result", "done"); n != 1 {
		t.Errorf("esfs_renames_total{result=done} = %v, want 1 (one mv)", n)
	}
	if n := mounttest.Sample(fams, "esfs_rename_documents_total"); n != 1 {
		t.Errorf("esfs_rename_documents_total = %v, want 1 (one file moved)", n)
	}
	if n := mounttest.Sample(fams, "esfs_renames_in_flight"); n != 0 {
		t.Errorf("esfs_renames_in_flight = %v, want 0", n)
	}
	if n := mounttest.Sample(fams, "esfs_es_errors_total"); n > 0 {
		t.Errorf("esfs_es_errors_total = %v on a healthy cluster", n)
	}
	atLeast("process RSS", mounttest.Sample(fams, "process_resident_memory_bytes"), 1<<20)

	// The counters move with the work: 20 more files, 20 more CREATEs.
	before := mounttest.Sample(fams, "esfs_fuse_request_duration_seconds", "op", "CREATE")
	mounttest.Sh(t, m.Dir, `for i in $(seq 20); do : > d/n$i; done`)
	after := mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_fuse_request_duration_seconds", "op", "CREATE")
	if after-before != 20 {
		t.Errorf("CREATE count went from %v to %v after 20 creates", before, after)
	}

	// A directory rename counts the directory and everything below it.
	mounttest.Sh(t, m.Dir, `mkdir t && touch t/a t/b t/c && mv t u`)
	if n := mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_rename_documents_total"); n != 1+4 {
		t.Errorf("esfs_rename_documents_total = %v after moving a directory of 3 files, want 5", n)
	}

	res, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "heap profile") {
		t.Errorf("/debug/pprof/heap: %s %.100q", res.Status, body)
	}

	// --log-format json: every line of the mount's log is a JSON object
	// with a level.
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(m.Log()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] == nil {
			t.Errorf("log line is not JSON with a level: %q", l)
		}
		lines++
	}
	if lines == 0 {
		t.Error("the mount logged nothing (want at least the mounted line)")
	}

	// esfs status says the same in words, from the heartbeat (every
	// lease/3 here).
	time.Sleep(1500 * time.Millisecond)
	out, err := f.Run("status", "--observe", "1s")
	if err != nil {
		t.Fatalf("esfs status: %v\n%s", err, out)
	}
	for _, want := range []string{m.Dir, "FUSE requests", "Elasticsearch requests", "metadata cache hits", "locks held 0", "renames 2, in flight 0, path documents moved 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("esfs status lacks %q:\n%s", want, out)
		}
	}
}

// TestObservabilityFlagErrors: bad logging and metrics flags are one clear
// line and a failed mount, never a half-observable one.
func TestObservabilityFlagErrors(t *testing.T) {
	f := mounttest.NewFS(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		name  string
		flags []string
		want  string
		code  int
	}{
		{"bad level", []string{"--log-level", "loud"}, "--log-level", 2},
		{"bad format", []string{"--log-format", "xml"}, "--log-format", 2},
		{"address in use", []string{"--metrics-addr", busy.Addr().String()}, "address already in use", 1},
		// A mistake on the command line (2), found before anything starts.
		{"bad address", []string{"--metrics-addr", "nonsense"}, "--metrics-addr", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(append([]string{"mount", "--es-url", f.URL, "--index", f.Index}, c.flags...), dir)
			r := mounttest.Run(t, mounttest.Cmd{Args: args, Env: []string{"ELASTICSEARCH_URL="}, Limit: 60 * time.Second})
			out, code := r.Out, r.Code
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != c.code || !strings.Contains(out, c.want) || len(lines) != 1 || mounttest.IsMounted(dir) {
				t.Errorf("%v: status %d (want %d), mounted %v, output:\n%s", c.flags, code, c.code, mounttest.IsMounted(dir), out)
			}
		})
	}
}
