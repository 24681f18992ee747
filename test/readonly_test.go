package test

// The admin commands that only read (status, locks, search, du, export,
// fsck without --repair) send no write to the cluster and wait for nothing.

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
)

// requestLog records the requests that go through a fault proxy.
type requestLog struct {
	mu   sync.Mutex
	reqs []string // "METHOD /path"
}

func recordRequests(p *mounttest.FaultProxy) *requestLog {
	l := &requestLog{}
	p.Intercept(func(_ http.ResponseWriter, r *http.Request, _ []byte) bool {
		l.mu.Lock()
		l.reqs = append(l.reqs, r.Method+" "+r.URL.Path)
		l.mu.Unlock()
		return false
	})
	return l
}

// take returns the requests recorded since the last take.
func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// isWrite tells a request that may change something in the cluster from
// one that only reads: GET and HEAD, searches, multi-gets, counts,
// refreshes and point-in-time snapshots read; anything else (bulk,
// index, create, update, delete, mapping or settings changes) writes.
func isWrite(req string) bool {
	method, path, _ := strings.Cut(req, " ")
	if method == "GET" || method == "HEAD" {
		return false
	}
	last := path[strings.LastIndex(path, "/")+1:]
	switch {
	case method == "POST" && (last == "_search" || last == "_mget" || last == "_count" || last == "_refresh" || last == "_pit"):
		return false
	case method == "POST" && strings.HasPrefix(path, "/_search/scroll"):
		return false
	case method == "DELETE" && path == "/_pit":
		return false
	}
	return true
}

// TestAdminCommandsOnlyRead: status, locks, search, du, export and fsck
// without --repair, run beside a live mount, send no write request (no
// session of their own, no verdict, no record) and still see what the
// mount made; status watches no heartbeat unless --observe says so (one
// read of the sessions, not two a few seconds apart); and a mount that
// writes a directory in memory is recalled by the one write they may
// make, only then.
func TestAdminCommandsOnlyRead(t *testing.T) {
	f := mounttest.NewFS(t)
	// Directories written synchronously: nothing to recall.
	m := f.Mount(t, "--write-delegations=false", "--lease", "2s")
	mounttest.Sh(t, m.Dir, `mkdir -p d/e && printf 'okapi\n' > d/e/f.txt && mv d/e/f.txt d/e/g.txt`)
	p := mounttest.NewFaultProxy(t, f.URL)
	reqs := recordRequests(p)
	sessionsSearch := regexp.MustCompile(`^POST /` + regexp.QuoteMeta(f.Index) + `-sessions/_search$`)
	countSessionReads := func(rs []string) int {
		n := 0
		for _, r := range rs {
			if sessionsSearch.MatchString(r) {
				n++
			}
		}
		return n
	}
	export := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		args []string
		want string // in the output
		code int
	}{
		{[]string{"status"}, m.Dir, 0},
		{[]string{"status", "--observe", "100ms"}, m.Dir, 0},
		{[]string{"locks"}, "PATH", 0},
		{[]string{"search", "okapi"}, "/d/e/g.txt", 0},
		{[]string{"search", "--name", "g.*"}, "/d/e/g.txt", 0},
		{[]string{"export", "/d", export}, "exported /d", 0},
		{[]string{"du", "-a", "/d"}, "\t/d/e/g.txt\n", 0},
		{[]string{"fsck", "--no-wait"}, "clean", 0},
		{[]string{"fsck"}, "clean", 0},
	} {
		name := strings.Join(c.args, " ")
		reqs.take()
		out, code := mounttest.RunOn(t, f, p.URL, c.args...)
		got := reqs.take()
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("esfs %s: status %d, want %d with %q in:\n%s", name, code, c.code, c.want, out)
		}
		var writes []string
		for _, r := range got {
			if isWrite(r) {
				writes = append(writes, r)
			}
		}
		if len(writes) > 0 {
			t.Errorf("esfs %s wrote: %s", name, strings.Join(writes, ", "))
		}
		if len(got) == 0 {
			t.Errorf("esfs %s: no request went through the proxy; this test proves nothing", name)
		}
		// status reads the sessions once, and a second time only to
		// watch heartbeats when asked to.
		switch name {
		case "status":
			if n := countSessionReads(got); n != 1 {
				t.Errorf("esfs status read the sessions %d times, want 1 (no watching unless --observe): %s", n, strings.Join(got, ", "))
			}
		case "status --observe 100ms":
			if n := countSessionReads(got); n != 2 {
				t.Errorf("esfs status --observe read the sessions %d times, want 2: %s", n, strings.Join(got, ", "))
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(export, "e", "g.txt")); err != nil || string(b) != "okapi\n" {
		t.Errorf("exported file: %q, %v", b, err)
	}

	// A mount that writes in memory (and would flush only in an hour) is
	// asked to flush by search: one write, the bulk that updates its
	// recall document.
	w := f.Mount(t, "--write-delegations", "--flush-interval=1h")
	mounttest.Sh(t, w.Dir, `mkdir mem && printf 'zebu\n' > mem/z.txt`)
	reqs.take()
	out, code := mounttest.RunOn(t, f, p.URL, "search", "zebu")
	got := reqs.take()
	if code != 0 || out != "/mem/z.txt\n" {
		t.Errorf("search of a file written in memory: status %d, %q", code, out)
	}
	var writes []string
	for _, r := range got {
		if isWrite(r) {
			writes = append(writes, r)
		}
	}
	if len(writes) != 1 || writes[0] != "POST /_bulk" {
		t.Errorf("search beside a mount writing in memory wrote %v, want one bulk (the updates of its recall document)", writes)
	}
}
