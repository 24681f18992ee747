package test

// The request log: what a fixed workload of calls asks of Elasticsearch,
// recorded by a proxy between one mount and the cluster, with what varies
// from run to run (ids, times, sequence numbers, the values in documents)
// taken out. It is the yardstick of a change that moves code without
// meaning to change behaviour: the log before and after must be the same.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// callLog records the requests a mount makes for calls (the header
// X-Opaque-Id says so), normalized, and the steps of the workload between
// them.
type callLog struct {
	index string // the filesystem's index prefix, written as FS

	mu    sync.Mutex
	lines []string
	last  time.Time // when the last request for a call arrived
}

func newCallLog(index string) *callLog {
	return &callLog{index: index}
}

func (l *callLog) hook(_ http.ResponseWriter, r *http.Request, body []byte) bool {
	// A call's requests, and those it set off and did not wait for
	// (marked "after:").
	mark := ""
	switch r.Header.Get("X-Opaque-Id") {
	case "esfs/call":
	case "esfs/after":
		mark = "after: "
	default:
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
	l.lines = append(l.lines, mark+l.normalize(r.Method, r.URL, body))
	return false
}

// step writes a step's name into the log once the requests of the step
// before have all arrived: none for a while.
func (l *callLog) step(t *testing.T, name string) {
	t.Helper()
	l.quiet(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, "== "+name)
}

func (l *callLog) quiet(t *testing.T) {
	t.Helper()
	mounttest.WaitFor(t, "no request for a call for a second", time.Minute, func() bool {
		time.Sleep(100 * time.Millisecond)
		l.mu.Lock()
		defer l.mu.Unlock()
		return time.Since(l.last) > time.Second
	})
}

// text is the log: each step's name, then its requests, sorted (a
// call's requests made at once, and the background work a call starts,
// arrive in any order); in a step whose name ends in distinctMark, each
// request once.
func (l *callLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out, step []string
	distinct := false
	end := func() {
		sort.Strings(step)
		if distinct {
			step = slices.Compact(step)
		}
		out = append(out, step...)
		step = step[:0]
	}
	for _, line := range l.lines {
		if strings.HasPrefix(line, "== ") {
			end()
			out = append(out, line)
			distinct = strings.HasSuffix(line, distinctMark)
			continue
		}
		step = append(step, line)
	}
	end()
	return strings.Join(out, "\n") + "\n"
}

// distinctMark ends the name of a step whose requests are compared as a
// set: one that waits for another mount, and asks again as often as that
// takes.
const distinctMark = " (each request once)"

// id writes a document id: as # whatever it is, since the requests of a
// call made at once arrive in any order, and ids numbered in order of
// arrival would differ between runs.
func (l *callLog) id(string) string { return "#" }

// index writes an index name with the filesystem's prefix as FS.
func (l *callLog) indexName(s string) string {
	return strings.ReplaceAll(s, l.index, "FS")
}

// unstableParams are the query parameters whose values differ between
// runs of the same request.
var unstableParams = map[string]bool{"if_seq_no": true, "if_primary_term": true, "version": true, "scroll_id": true}

// normalize is one request as a line (and its body's lines below it,
// indented): the method, the path with index names and document ids
// written as above, the query's parameters, and the shape of each JSON
// document of the body (keys, and for values only their kind).
func (l *callLog) normalize(method string, u *url.URL, body []byte) string {
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	for i, seg := range strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		seg, _ = url.PathUnescape(seg)
		switch {
		case strings.HasPrefix(seg, "_"), strings.Contains(seg, l.index), seg == "":
			b.WriteString(l.indexName(seg))
		default:
			b.WriteString(l.id(seg))
		}
	}
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		v := q.Get(k)
		if unstableParams[k] {
			v = "_"
		}
		fmt.Fprintf(&b, "%s%s=%s", sep, k, l.indexName(v))
	}
	// A bulk's items (an action, and its document unless a delete) come
	// in the order of the map that gathered them: sorted here.
	var items []string
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			items = append(items, fmt.Sprintf("(%d bytes, not JSON)", len(line)))
			continue
		}
		var sb strings.Builder
		l.shape(&sb, "", v)
		if len(items) > 0 && isBulkSource(items[len(items)-1]) {
			items[len(items)-1] += "\n    " + sb.String()
			continue
		}
		items = append(items, sb.String())
	}
	if strings.Contains(u.Path, "_bulk") {
		sort.Strings(items)
	}
	for _, it := range items {
		b.WriteString("\n    " + it)
	}
	return b.String()
}

// isBulkSource tells whether a bulk's item so far (an action line's
// shape) is one a document follows: all but a delete.
func isBulkSource(item string) bool {
	return !strings.Contains(item, "\n") && (strings.HasPrefix(item, "{index:") ||
		strings.HasPrefix(item, "{create:") || strings.HasPrefix(item, "{update:"))
}

// shape writes v with the values that vary replaced by their kind; ids
// (of an action's _id, or an mget's ids) become placeholders, index
// names keep their role.
func (l *callLog) shape(b *strings.Builder, key string, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if idKey.MatchString(k) {
				b.WriteString(l.id(k))
			} else {
				b.WriteString(k)
			}
			b.WriteByte(':')
			l.shape(b, k, v[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			l.shape(b, key, e)
		}
		b.WriteByte(']')
	case string:
		switch key {
		case "_id", "ids":
			b.WriteString(l.id(v))
		case "_index":
			b.WriteString(l.indexName(v))
		default:
			b.WriteString("s")
		}
	case float64:
		b.WriteString("n")
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	}
}

// idKey matches the keys that are ids (of a waiter, a holder).
var idKey = regexp.MustCompile(`^[A-Za-z]?[0-9a-f]{6,}$`)

const requestLogGolden = "testdata/requestlog.golden"

// TestRequestLog runs a fixed workload on mounts A and W, which reach the
// cluster through a recording proxy, and compares what they asked of it
// for calls with testdata/requestlog.golden: on A the synchronous path in
// directories another mount made (create, write, read, chmod, a rename
// within a directory and across two, a directory's rename, unlink,
// rmdir), then on W a directory it made, written in memory, which a third
// mount's look recalls. ESFS_UPDATE_REQUEST_LOG=1 writes the log there
// instead, for a change meant to change what is asked.
func TestRequestLog(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	// The kernel's caches kept for the whole run, and no timed flush:
	// nothing the workload asks depends on how fast it runs.
	// The daemon's cache is off: whether it keeps an entry is its
	// admission policy's choice, which varies between runs. The lease is
	// longer than the run: no renewal comes in between.
	flags := []string{"--entry-timeout=1h", "--attr-timeout=1h", "--cache-ttl=0", "--flush-interval=1h", "--lease=10m"}
	// B, which makes the directories A works in, holds no delegation: A
	// never waits for B to answer a recall (which it would by polling, as
	// often as B takes). C, which recalls W's delegation, is mounted only
	// for that, lest W recall it before.
	b := mounttest.MountUncached(t, f, nil, "--delegations=false")
	for _, d := range []string{"s", "t"} {
		if err := os.Mkdir(b.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b.Sync(t)
	log := newCallLog(f.Index)
	fp.Intercept(log.hook)
	// A takes the synchronous path: without delegations, no grant runs
	// beside its calls and races them for the same lock documents (how
	// often a compare-and-set is tried again would vary). W, through the
	// same proxy, holds delegations, and works alone in a directory it
	// made.
	a := f.Mount(t, append([]string{"--es-url", fp.URL, "--delegations=false"}, flags...)...)
	var w *mounttest.Mount
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		run  func()
	}{
		{"look at s and t", func() { must(ignore(os.ReadDir(a.Path("s")))); must(ignore(os.Stat(a.Path("t")))) }},
		{"create s/f with 5 bytes", func() { must(os.WriteFile(a.Path("s", "f"), []byte("hello"), 0o644)) }},
		{"stat s/f", func() { must(ignore(os.Stat(a.Path("s", "f")))) }},
		{"read s/f", func() { must(ignore(os.ReadFile(a.Path("s", "f")))) }},
		{"chmod s/f", func() { must(os.Chmod(a.Path("s", "f"), 0o600)) }},
		{"rename s/f s/g", func() { must(os.Rename(a.Path("s", "f"), a.Path("s", "g"))) }},
		{"rename s/g t/g", func() { must(os.Rename(a.Path("s", "g"), a.Path("t", "g"))) }},
		{"mkdir s/d", func() { must(os.Mkdir(a.Path("s", "d"), 0o755)) }},
		{"rename s/d t/d", func() { must(os.Rename(a.Path("s", "d"), a.Path("t", "d"))) }},
		{"rename t u (a directory of two entries)", func() { must(os.Rename(a.Path("t"), a.Path("u"))) }},
		{"unlink u/g", func() { must(os.Remove(a.Path("u", "g"))) }},
		{"rmdir u/d", func() { must(os.Remove(a.Path("u", "d"))) }},
		// The grant of the root's delegation ends before the mkdir, lest
		// the two race for its lock document.
		{"mount W, list /", func() {
			w = f.Mount(t, append([]string{"--es-url", fp.URL}, flags...)...)
			must(ignore(os.ReadDir(w.Path())))
		}},
		{"mkdir w (W's own)", func() { must(os.Mkdir(w.Path("w"), 0o755)) }},
		{"create w/x and w/y in memory", func() {
			must(os.WriteFile(w.Path("w", "x"), []byte("x data"), 0o644))
			must(os.WriteFile(w.Path("w", "y"), []byte("y data"), 0o644))
		}},
		// C waits for W's answer and W for C's lock, each reading again as
		// often as the other takes.
		{"C reads w/x: recalls W's delegation" + distinctMark, func() {
			c := mounttest.MountUncached(t, f, nil)
			got, err := os.ReadFile(c.Path("w", "x"))
			must(err)
			if string(got) != "x data" {
				t.Fatalf("B read %q from w/x, want %q", got, "x data")
			}
			// C's read delegations, asked for in the background, go with
			// it, before W's step: W met them granted or not, run to run.
			sess := mounttest.Session(t, f, c)
			c.Unmount(t)
			mounttest.WaitFor(t, "C's lock entries gone", 30*time.Second, func() bool {
				out, err := f.Run("locks")
				return err == nil && !strings.Contains(out, sess.ID)
			})
			// A recall C wrote again after W had read it (C repeats its
			// recall while it waits) stays in W's recall document, which
			// W clears at its next answer: W would give back the read
			// delegation its next step takes, or not, run to run (a
			// stale recall costs a holder one grant; noted for a fix).
			ctx := context.Background()
			r, err := f.Store.GetRecalls(ctx, mounttest.Session(t, f, w).ID)
			must(err)
			if r.Ver.Known() {
				if _, err := f.Store.Write(ctx, store.ClearRecalls(r)); err != nil && !errors.Is(err, store.ErrNotFound) {
					must(err)
				}
			}
		}},
		{"W reads w/y", func() { must(ignore(os.ReadFile(w.Path("w", "y")))) }},
		{"fsync w", func() {
			d, err := os.Open(w.Path("w"))
			must(err)
			defer d.Close()
			must(d.Sync())
		}},
	}
	for _, s := range steps {
		log.step(t, s.name)
		s.run()
	}
	log.quiet(t)
	got := log.text()
	golden := filepath.Join(mounttest.RepoRoot(), "test", requestLogGolden)
	if os.Getenv("ESFS_UPDATE_REQUEST_LOG") == "1" {
		must(os.WriteFile(golden, []byte(got), 0o644))
		t.Logf("wrote %s", golden)
		return
	}
	want, err := os.ReadFile(golden)
	must(err)
	if got != string(want) {
		t.Errorf("the requests of the workload differ from %s (ESFS_UPDATE_REQUEST_LOG=1 writes them there if the change is meant):\n%s",
			requestLogGolden, lineDiff(string(want), got))
	}
}

func ignore[T any](_ T, err error) error { return err }

// lineDiff shows where two logs part: the first differing step, whole
// on both sides.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	step := ""
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if strings.HasPrefix(wl, "== ") {
			step = wl
		}
		if wl != gl {
			return fmt.Sprintf("in step %q, line %d:\nwant: %s\ngot:  %s\nwant the step:\n%s\ngot the step:\n%s",
				step, i+1, wl, gl, stepOf(w, step), stepOf(g, step))
		}
	}
	return "(the same)"
}

func stepOf(lines []string, step string) string {
	var out []string
	in := false
	for _, l := range lines {
		if strings.HasPrefix(l, "== ") {
			in = l == step
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
