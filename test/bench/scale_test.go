package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// The scale group: a tree of N small files, N from
// ESFS_BENCH_SCALE_FILES (default 10000,100000; the full scale adds
// 1000000), one directory of min(N, 100000) of them and the rest in
// directories of 1,000: `esfs import` of it, `ls -f` and `ls -l` of the
// big directory, `find` and `du -s` of the whole tree, the big directory
// renamed, and the mount's peak memory; each against the raw requests of
// the same work in the same run (path, inode and chunk documents written
// by bulks; a scan of the directory's or the tree's path documents; the
// rewrite of the renamed paths). The rows' names carry N: how a figure
// grows from one N to the next is the point.
func benchScale(s *suite) {
	t := s.t
	list := os.Getenv("ESFS_BENCH_SCALE_FILES")
	if list == "" {
		list = "10000,100000"
		if s.scale == "full" {
			list += ",1000000"
		}
	}
	for _, field := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n < 1000 {
			t.Fatalf("ESFS_BENCH_SCALE_FILES=%q: want numbers of files, each at least 1000", list)
		}
		scaleOnce(s, n)
	}
}

// scaleTree writes the local tree of n files of 64 bytes: big/ holds
// min(n, 100000), d0000/... 1,000 each the rest.
func scaleTree(s *suite, n int) (src string, big int) {
	src = s.t.TempDir()
	big = min(n, 100000)
	body := []byte(strings.Repeat("scale\n", 10) + "1234\n")
	write := func(dir string, count int) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s.t.Fatal(err)
		}
		for i := 0; i < count; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), body, 0o644); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	write(filepath.Join(src, "big"), big)
	for d, left := 0, n-big; left > 0; d, left = d+1, left-1000 {
		write(filepath.Join(src, fmt.Sprintf("d%04d", d)), min(1000, left))
	}
	return src, big
}

func scaleOnce(s *suite, n int) {
	t := s.t
	src, big := scaleTree(s, n)
	dirs := (n - big + 999) / 1000
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	name := func(what string) string { return fmt.Sprintf("scale_%d %s", n, what) }

	// Import, against a raw write of the same documents.
	start := time.Now()
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("esfs import of %d files: %v\n%s", n, err, tail(out, 20))
	}
	imp := time.Since(start)
	rawRootN := fmt.Sprintf("%s/scale%d", rawRoot, n)
	start = time.Now()
	r.scaleWrite(rawRootN, big, n-big)
	s.add(row{name: name("import"), workload: fmt.Sprintf("`esfs import` of %d files of 64 bytes (%d in one directory, %d directories of 1,000)", n, big, dirs),
		floor: "raw bulks of the path, inode and chunk documents of every file (3,000 items a request, 4 in flight)", esfs: []time.Duration{imp}, base: []time.Duration{time.Since(start)}})
	r.refresh()

	m := f.MountAt(t, t.TempDir(), nil)
	bigDir := m.Path("t", "big")
	scanBig := func() time.Duration {
		start := time.Now()
		if got := r.scanDir(rawRootN+"/big", 10000); got != big {
			t.Fatalf("raw scan of the big directory saw %d of %d", got, big)
		}
		return time.Since(start)
	}
	for _, flag := range []string{"-f", "-l"} {
		var esfs, floor []time.Duration
		for i := 0; i < s.reps; i++ {
			d, lines := ls(t, bigDir, flag)
			if want := big + 2; flag == "-f" && lines != want || flag == "-l" && lines != big+1 {
				t.Fatalf("ls %s of %d entries printed %d lines", flag, big, lines)
			}
			esfs, floor = append(esfs, d), append(floor, scanBig())
		}
		s.add(row{name: name("ls " + flag), workload: fmt.Sprintf("`ls %s` of the directory of %d", flag, big),
			floor: "raw PIT scan of its path documents, 10k hits a page", esfs: esfs, base: floor})
	}
	scanAll := func() time.Duration {
		start := time.Now()
		if got := r.scan(map[string]any{"prefix": map[string]any{"path": rawRootN + "/"}}, "path", 10000); got < n {
			t.Fatalf("raw scan of the tree saw %d of at least %d", got, n)
		}
		return time.Since(start)
	}
	for _, tool := range [][]string{{"find", m.Path("t")}, {"du", "-s", m.Path("t")}} {
		var esfs, floor []time.Duration
		for i := 0; i < s.reps; i++ {
			dropCaches(t) // the kernel's names and attributes: each pass asks the mount
			start := time.Now()
			out, err := exec.Command(tool[0], tool[1:]...).Output()
			esfs = append(esfs, time.Since(start))
			if err != nil {
				t.Fatalf("%s: %v", strings.Join(tool, " "), err)
			}
			if tool[0] == "find" && strings.Count(string(out), "\n") != n+dirs+2 {
				t.Fatalf("find printed %d lines for %d files in %d directories", strings.Count(string(out), "\n"), n, dirs+1)
			}
			floor = append(floor, scanAll())
		}
		s.add(row{name: name(tool[0]), workload: fmt.Sprintf("`%s` of the whole tree (%d files), through the mount", strings.Join(append(tool[:1:1], tool[1:len(tool)-1]...), " "), n),
			floor: "raw PIT scan of every path document of the tree, 10k hits a page", esfs: esfs, base: floor})
	}

	// The big directory renamed, until a listing of the new name is whole.
	start = time.Now()
	if err := os.Rename(bigDir, m.Path("t", "big2")); err != nil {
		t.Fatal(err)
	}
	if _, lines := ls(t, m.Path("t", "big2"), "-f"); lines != big+2 {
		t.Fatalf("the renamed directory lists %d entries of %d", lines-2, big)
	}
	ren := time.Since(start)
	start = time.Now()
	r.scaleRename(rawRootN+"/big", rawRootN+"/big2", big)
	r.refresh()
	if got := r.scanDir(rawRootN+"/big2", 10000); got != big {
		t.Fatalf("raw rename: %d of %d", got, big)
	}
	s.add(row{name: name("rename"), workload: fmt.Sprintf("rename of the directory of %d, until `ls -f` of the new name lists it whole", big),
		floor: "raw bulks rewriting its path documents (2N items, 5000 a request, 4 in flight), refresh, scan", esfs: []time.Duration{ren}, base: []time.Duration{time.Since(start)}})

	s.add(row{name: name("memory"), workload: "the mount's peak RSS (VmHWM) through the listings, find, du and the rename",
		absolute: fmt.Sprintf("%.0f MiB", peakRSS(t, m.Pid())), target: "< 300 MiB"})
}

// scaleWrite writes, as raw bulks, the documents of big files in
// root/big and rest files in root/dNNNN (1,000 each): a path, an inode and
// a chunk document each, and the directories' own.
func (r *raw) scaleWrite(root string, big, rest int) {
	jobs := make(chan []string)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for items := range jobs {
				r.do("POST", "/_bulk", []byte(strings.Join(items, "")))
			}
		}()
	}
	var items []string
	flush := func(force bool) {
		if len(items) >= 3000 || force && len(items) > 0 {
			jobs <- items
			items = nil
		}
	}
	add := func(path, typ string, data bool) {
		ino := nextIno()
		items = append(items, r.createAction(r.prefix, store.DocID(path), pathDoc(path, ino, typ)),
			r.createAction(r.prefix+"-inodes", strconv.FormatUint(ino, 10), inodeDoc(ino, typ)))
		if data {
			doc, _ := json.Marshal(map[string]any{"ino": ino, "chunk": 0, "text": strings.Repeat("scale\n", 10) + "1234\n"})
			items = append(items, r.createAction(r.prefix+"-data", fmt.Sprintf("%d.0", ino), string(doc)))
		}
		flush(false)
	}
	dir := func(d string, count int) {
		add(d, "dir", false)
		for i := 0; i < count; i++ {
			add(fmt.Sprintf("%s/f%06d", d, i), "file", true)
		}
	}
	add(root, "dir", false)
	dir(root+"/big", big)
	for d, left := 0, rest; left > 0; d, left = d+1, left-1000 {
		dir(fmt.Sprintf("%s/d%04d", root, d), min(1000, left))
	}
	flush(true)
	close(jobs)
	wg.Wait()
}

// scaleRename rewrites the path documents of the n files below from to
// below to (new documents created, old ones deleted), as raw bulks.
func (r *raw) scaleRename(from, to string, n int) {
	items := make([]string, 0, 2*n)
	for i := 0; i < n; i++ {
		old, now := fmt.Sprintf("%s/f%06d", from, i), fmt.Sprintf("%s/f%06d", to, i)
		items = append(items, r.createAction(r.prefix, store.DocID(now), pathDoc(now, nextIno(), "file")), r.deleteAction(r.prefix, store.DocID(old)))
	}
	r.bulk(items, 5000, 4)
}
