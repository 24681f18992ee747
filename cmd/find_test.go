package cmd

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// testFindEnv parses at a fixed time, in a UTF-8 locale, with two users
// and groups.
func testFindEnv() findEnv {
	ids := map[string]uint32{"root": 0, "alice": 1000}
	return findEnv{
		now:     time.Date(2024, 3, 5, 12, 0, 0, 500000000, time.UTC),
		chars:   true,
		lookupU: func(n string) (uint32, bool) { id, ok := ids[n]; return id, ok },
		lookupG: func(n string) (uint32, bool) { id, ok := ids[n]; return id, ok },
		lstat:   func(string) (os.FileInfo, error) { return nil, os.ErrNotExist },
	}
}

// testEntry is a file below the starting point "top".
func testEntry(path string, typ store.FileType, a store.Inode) *fentry {
	s := &findStart{given: "top", fsPath: "/top"}
	a.Type = typ
	depth := strings.Count(path, "/") + 1
	_, name := store.Split("/" + path)
	return &fentry{path: "top/" + path, start: s, depth: depth, d: store.Dentry{Name: name, Type: typ}, attr: a}
}

// run parses args and judges each entry, returning what it printed.
func runExpr(t *testing.T, args []string, entries ...*fentry) string {
	t.Helper()
	x, err := parseFind(args, testFindEnv())
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	var buf bytes.Buffer
	fr := &findRun{x: x, out: bufio.NewWriter(&buf), ids: newIDNames(), chunkSize: 1 << 20}
	for _, e := range entries {
		x.root.eval(fr, e)
	}
	fr.out.Flush()
	return buf.String()
}

// TestFindParseErrors: mistakes get GNU find's messages (status 1).
func TestFindParseErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-name"}, "missing argument to `-name'"},
		{[]string{"-foo"}, "unknown predicate `-foo'"},
		{[]string{"(", "-name", "x"}, "expecting to find a ')'"},
		{[]string{"-o", "-name", "x"}, "binary operator '-o' with nothing before it"},
		{[]string{"-name", "x", "-o"}, "expected an expression after '-o'"},
		{[]string{"!"}, "expected an expression after '!'"},
		{[]string{"(", ")"}, "empty parentheses are not allowed"},
		{[]string{"-name", "x", ")"}, "too many ')'"},
		{[]string{"-name", "x", "y"}, "paths must precede expression: `y'"},
		{[]string{"-type", "q"}, "Unknown argument to -type: q"},
		{[]string{"-type", "f,"}, "list is ending on: ','"},
		{[]string{"-type", "ff"}, "separate multiple arguments"},
		{[]string{"-type", "f,f"}, "Duplicate file type"},
		{[]string{"-size", "3q"}, "invalid -size type `q'"},
		{[]string{"-size", "+"}, "invalid argument `+' to `-size'"},
		{[]string{"-size", "+99999999999999999999G"}, "Invalid argument `+99999999999999999999G' to -size"},
		{[]string{"-perm", "999"}, "invalid mode ‘999’"},
		{[]string{"-perm", "u+q"}, "invalid mode"},
		{[]string{"-mtime", "x"}, "invalid argument `x' to `-mtime'"},
		{[]string{"-links", "+x"}, "invalid argument `+x' to `-links'"},
		{[]string{"-user", "nosuch"}, "‘nosuch’ is not the name of a known user"},
		{[]string{"-maxdepth", "-1"}, "positive decimal integer"},
		{[]string{"-newer", "/nonexistent"}, "‘/nonexistent’: "},
		{[]string{"-printf", "%"}, "% at end of format string"},
		{[]string{"-exec", "rm", ";"}, "-exec is not supported by esfs find"},
		{[]string{"-daystart", ",", "-print"}, "binary operator ','"},
	} {
		_, err := parseFind(append([]string{"top"}, c.args...), testFindEnv())
		var fe findError
		if !errors.As(err, &fe) || !strings.Contains(fe.msg, c.want) {
			t.Errorf("%q: %v, want a findError with %q", c.args, err, c.want)
		}
	}
}

// TestFindPrecedence: ! binds tighter than -a (or side by side), which
// binds tighter than -o, then ','; -print is the default only without an
// action; options are true.
func TestFindPrecedence(t *testing.T) {
	f := testEntry("a.txt", store.TypeFile, store.Inode{Size: 10})
	d := testEntry("dir", store.TypeDir, store.Inode{})
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "top/a.txt\ntop/dir\n"},
		{[]string{"-name", "*.txt", "-o", "-type", "d", "-print"}, "top/dir\n"},
		{[]string{"(", "-name", "*.txt", "-o", "-type", "d", ")", "-print"}, "top/a.txt\ntop/dir\n"},
		{[]string{"!", "-type", "d", "-name", "a*"}, "top/a.txt\n"},
		{[]string{"-not", "-type", "d", "-o", "-name", "d*"}, "top/a.txt\ntop/dir\n"},
		{[]string{"-type", "f", "-printf", "F%f\\n", "-o", "-printf", "D%f\\n"}, "Fa.txt\nDdir\n"},
		{[]string{"-printf", "1", ",", "-printf", "2\\n"}, "12\n12\n"},
		{[]string{"-false", "-o", "-maxdepth", "3"}, "top/a.txt\ntop/dir\n"},
		{[]string{"-type", "f", "-a", "-size", "-1k"}, ""},
		{[]string{"-type", "f", "-and", "-size", "1k"}, "top/a.txt\n"},
		{[]string{"-name", "x", "-or", "-type", "f"}, "top/a.txt\n"},
		// GNU's comma order: the costlier operand's value (-size) decides.
		{[]string{"-size", "+5k", ",", "-type", "d"}, ""},
		{[]string{"-type", "d", ",", "-name", "*"}, "top/dir\n"},
		{[]string{"-size", "+5k", ",", "-name", "x", ",", "-type", "d"}, "top/dir\n"},
		{[]string{"-name", "x", ",", "-size", "+5k", ",", "-type", "d"}, ""},
		{[]string{"-size", "+5k", ",", "-type", "d", ",", "-name", "*"}, "top/dir\n"},
	} {
		if got := runExpr(t, append([]string{"top"}, c.args...), f, d); got != c.want {
			t.Errorf("find %q: %q, want %q", c.args, got, c.want)
		}
	}
}

// TestFindSize: sizes count in units rounded up, as GNU find's.
func TestFindSize(t *testing.T) {
	for _, c := range []struct {
		arg    string
		lo, hi int64
	}{
		{"0", 0, 0},
		{"1", 1, 512},
		{"2k", 1025, 2048},
		{"-1M", 0, 0},
		{"-2M", 0, 1 << 20},
		{"+1M", 1<<20 + 1, math.MaxInt64},
		{"100c", 100, 100},
		{"-0", 1, 0},
		{"+0", 1, math.MaxInt64},
		{"3w", 5, 6},
		{"1G", 1, 1 << 30},
		{"+99999999999999999G", 1, 0},
		{"99999999999999999G", 1, 0},
		{"-18446744073709551615c", 0, math.MaxInt64 - 1},
	} {
		lo, hi, err := parseSize(c.arg)
		if err != nil || lo != c.lo || hi != c.hi {
			t.Errorf("-size %s: [%d, %d] %v, want [%d, %d]", c.arg, lo, hi, err, c.lo, c.hi)
		}
	}
}

// TestFindPerm: modes octal and symbolic, as chmod takes them.
func TestFindPerm(t *testing.T) {
	for _, c := range []struct {
		arg       string
		file, dir uint32
	}{
		{"644", 0o644, 0o644},
		{"-4000", 0o4000, 0o4000},
		{"u=rwx,g=rx,o=rx", 0o755, 0o755},
		{"a+X", 0, 0o111},
		{"u+s", 0o4000, 0o4000},
		{"+t", 0o1000, 0o1000},
		{"g+w,o-w", 0o020, 0o020},
		{"u=rw,g=u", 0o660, 0o660},
		{"o=r,u=o", 0o404, 0o404},
		{"=r", 0o444, 0o444},
	} {
		pm, err := parsePerm(c.arg)
		if err != nil || pm.val[0] != c.file || pm.val[1] != c.dir {
			t.Errorf("-perm %s: %o %o %v, want %o %o", c.arg, pm.val[0], pm.val[1], err, c.file, c.dir)
		}
	}
	exact, _ := parsePerm("755")
	all, _ := parsePerm("-644")
	any, _ := parsePerm("/022")
	zero, _ := parsePerm("/000")
	for _, c := range []struct {
		t    permTest
		mode uint32
		want bool
	}{
		{exact, 0o755, true}, {exact, 0o4755, false}, {all, 0o700, false}, {all, 0o4666, true},
		{any, 0o700, false}, {any, 0o720, true}, {zero, 0, true},
	} {
		if got := c.t.holds(store.TypeFile, c.mode); got != c.want {
			t.Errorf("-perm %c%o on %o: %v", c.t.kind, c.t.val[0], c.mode, got)
		}
	}
	if zero.warning == "" {
		t.Error("-perm /000 without GNU's warning")
	}
}

// TestFindTimes: GNU's windows: -mtime N is (start-(N+1) days, start-N
// days], -mtime -N newer than start-N days (less a second), -mmin on the
// start itself.
func TestFindTimes(t *testing.T) {
	env := testFindEnv()
	now := env.now.UnixNano()
	const day, minute = int64(86400e9), int64(60e9)
	for _, c := range []struct {
		arg  string
		min  bool
		ns   int64
		want bool
	}{
		{"0", false, now, true},
		{"0", false, now - day + 1, true},
		{"0", false, now - day, false},
		{"1", false, now - day, true},
		{"1", false, now - 2*day, false},
		{"-1", false, now - day + 1, true},
		{"-1", false, now - day - 500e6, true}, // less a second: GNU's origin for -N
		{"-1", false, now - day - 1e9, false},
		{"+1", false, now - 2*day, false},
		{"+1", false, now - 2*day - 1, true},
		{"1", true, now, true},
		{"1", true, now - minute, false},
		{"0", true, now + 1, true},
		{"-5", true, now - 5*minute + 1, true},
		{"+5", true, now - 5*minute - 1, true},
		{"1.5", false, now - 2*day, true},
		{"-1e300", false, math.MinInt64 + 1, true},
		{"+1e300", false, math.MinInt64 + 1, false},
		{"-inf", false, now, true},
	} {
		p := &findParser{env: env}
		w, err := p.timeWindow(c.arg, c.min)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.holds(c.ns); got != c.want {
			t.Errorf("time %q (minutes %v) at now%+dns: %v", c.arg, c.min, c.ns-now, got)
		}
		// What is pushed down holds wherever the test does (when), and
		// wherever it does not (unless).
		when, unless := w.pushdown(store.FieldMtime)
		a := &store.Inode{Mtime: c.ns}
		if c.want && !when.inode.Holds(store.Dentry{}, a) || !c.want && !unless.inode.Holds(store.Dentry{}, a) {
			t.Errorf("time %q (minutes %v) at now%+dns: the pushdown %v / %v misses it", c.arg, c.min, c.ns-now, when.inode, unless.inode)
		}
	}
}

// TestFnmatch: glibc's fnmatch in a UTF-8 locale (characters, then
// bytes) and in the C locale (bytes).
func TestFnmatch(t *testing.T) {
	for _, c := range []struct {
		pat, name   string
		fold, chars bool
		want        bool
	}{
		{"*.txt", "a.txt", false, true, true},
		{"?", "é", false, true, true},
		{"??", "é", false, true, true}, // glibc falls back to bytes
		{"???", "é", false, true, false},
		{"?", "é", false, false, false},
		{"bad?", "bad\xff", false, true, true},
		{"[!a-z]*", "İstanbul", true, true, true},
		{"[a-c]x", "bx", false, true, true},
		{"[!]]", "]", false, true, false},
		{"[]a]", "]", false, true, true},
		{"[", "[", false, true, true},
		{"a\\*", "a*", false, true, true},
		{"a\\", "a\\", false, true, false},
		{"*[[:upper:]]*", "Makefile", true, true, true},
		{"*[[:digit:]]", "f10", false, true, true},
		{"[[:nope:]]", "a", false, true, false},
		{"K", "\u212a", true, true, true},
		{"README", "readme", true, false, true},
		{"É", "é", true, false, false},
		{"É", "é", true, true, true},
		{"*", ".hidden", false, true, true},
		{"a*b*c", "aXbYbZc", false, true, true},
	} {
		if got := fnmatch(c.pat, c.name, c.fold, c.chars); got != c.want {
			t.Errorf("fnmatch(%q, %q, fold %v, chars %v) = %v", c.pat, c.name, c.fold, c.chars, got)
		}
	}
}

// TestFindNames: %f, %h and -name of starting points, as GNU find names
// them.
func TestFindNames(t *testing.T) {
	for _, c := range []struct{ path, base, dir, name string }{
		{"a", "a", ".", "a"},
		{"a/", "a/", "a", "a"},
		{"a//", "a/", "a/", "a"},
		{"./a", "a", ".", "a"},
		{"/", "/", "", "/"},
		{".", ".", ".", "."},
		{"a/b/c", "c", "a/b", "c"},
		{"./a/b/", "b/", "./a", "b"},
	} {
		if b, d, n := baseName(c.path), dirOfPath(c.path), nameOfPath(c.path); b != c.base || d != c.dir || n != c.name {
			t.Errorf("%q: %%f %q, %%h %q, -name %q; want %q %q %q", c.path, b, d, n, c.base, c.dir, c.name)
		}
	}
}

// TestFindPrintf: directives, widths, flags and escapes as GNU's.
func TestFindPrintf(t *testing.T) {
	mtime := time.Date(2024, 3, 5, 7, 8, 9, 123456789, time.UTC).UnixNano()
	e := testEntry("d/f.txt", store.TypeFile, store.Inode{Ino: 7, Size: 1536, Mode: 0o4755, Uid: 1000, Gid: 0, Nlink: 2,
		Mtime: mtime, Atime: mtime, Ctime: mtime, Chunks: 1})
	neg := testEntry("old", store.TypeFile, store.Inode{Mtime: -500000000})
	for _, c := range []struct {
		format string
		e      *fentry
		want   string
	}{
		{`%p|%P|%f|%h|%H|%d`, e, "top/d/f.txt|d/f.txt|f.txt|top/d|top|2"},
		{`%s %b %k %n %i %m %M %y`, e, "1536 3 2 2 7 4755 -rwsr-xr-x f"},
		{`%t|%T@|%TY-%Tm-%Td %TT|%T+`, e, "Tue Mar  5 07:08:09.1234567890 2024|1709622489.1234567890|2024-03-05 07:08:09.1234567890|2024-03-05+07:08:09.1234567890"},
		{`%T@`, neg, "-1.5000000000"},
		{`%-6m|%6s|%.2f|%05d|%+d|%#m`, e, "4755  |  1536|f.|00002|+2|04755"},
		{`a\tb\\c\101%%\0`, e, "a\tb\\cA%\x00"},
		{`x\cy`, e, "x"},
		{`%U %G %u`, e, "1000 0 1000"},
		{`%q`, e, "%q"},
	} {
		segs, err := parsePrintf(c.format, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		fr := &findRun{out: bufio.NewWriter(&buf), ids: &idNames{users: map[uint32]string{1000: "1000"}, groups: map[uint32]string{0: "0"},
			knownU: map[uint32]bool{}, knownG: map[uint32]bool{}}, chunkSize: 1 << 20}
		fr.writePrintf(segs, c.e)
		fr.out.Flush()
		if buf.String() != c.want {
			t.Errorf("-printf %q: %q, want %q", c.format, buf.String(), c.want)
		}
	}
}

// TestFindOrder: a walk's order, in listings' order (bytes that are not
// UTF-8 last), a directory before its entries (after them with -depth).
func TestFindOrder(t *testing.T) {
	paths := []string{"/a", "/a/b", "/a-c", "/a/b/c", "/b\xff", "/bé", "/B"}
	want := []string{"/B", "/a", "/a/b", "/a/b/c", "/a-c", "/bé", "/b\xff"}
	got := append([]string{}, paths...)
	sortPaths(got, false)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("order %q, want %q", got, want)
	}
	sortPaths(got, true)
	if want := []string{"/B", "/a/b/c", "/a/b", "/a", "/a-c", "/bé", "/b\xff"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("-depth order %q, want %q", got, want)
	}
}

func sortPaths(p []string, post bool) {
	for i := range p {
		for j := i + 1; j < len(p); j++ {
			if pathLess(p[j], p[i], post) {
				p[i], p[j] = p[j], p[i]
			}
		}
	}
}

// TestFindPushdown: the conditions pushed down hold for every file an
// action runs for (a superset), for random expressions and files.
func TestFindPushdown(t *testing.T) {
	files := []*fentry{
		testEntry("a.txt", store.TypeFile, store.Inode{Size: 0, Mode: 0o644, Nlink: 1}),
		testEntry("big", store.TypeFile, store.Inode{Size: 5 << 20, Mode: 0o4755, Nlink: 2, Uid: 1000}),
		testEntry("dir", store.TypeDir, store.Inode{Mode: 0o755, Nlink: 2}),
		testEntry("link", store.TypeSymlink, store.Inode{Size: 3, Mode: 0o777, Nlink: 1, Target: "a.t"}),
	}
	exprs := [][]string{
		{"-name", "*.txt"}, {"!", "-name", "*.txt"}, {"-size", "+1M", "-o", "-type", "d"},
		{"!", "(", "-size", "-1k", "-a", "-type", "f", ")"}, {"-perm", "-4000", "-printf", "%p\n", "-o", "-empty", "-print"},
		{"-name", "a.txt", ",", "-type", "l"}, {"-not", "-empty"}, {"-links", "2", "!", "-user", "alice"},
		{"-type", "f,l", "-size", "-4c"}, {"-false"}, {"-true", "-o", "-size", "+9G"}, {"-perm", "/111"},
	}
	for _, args := range exprs {
		x, err := parseFind(append([]string{"top"}, args...), testFindEnv())
		if err != nil {
			t.Fatal(err)
		}
		act := x.root.acts()
		for _, f := range files {
			var buf bytes.Buffer
			fr := &findRun{x: x, out: bufio.NewWriter(&buf), ids: newIDNames(), chunkSize: 1 << 20}
			x.root.eval(fr, f)
			fr.out.Flush()
			printed := buf.Len() > 0
			d := store.Dentry{Path: "/top/" + f.path[len("top/"):], Name: f.d.Name, Type: f.d.Type}
			if printed && (!act.path.Holds(d, nil) || !act.inode.Holds(store.Dentry{}, &f.attr)) {
				t.Errorf("find %q prints %s, but the pushdown %v / %v does not hold for it", args, f.path, act.path, act.inode)
			}
		}
	}
}
