package test

// esfs find against GNU find: random expressions on a generated tree
// (difftree_test.go), each run by GNU find through a mount and by esfs
// find, whose output and exit status must be the same, byte for byte and
// in the same order.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// findDiffRuns is how many expressions a run tries (ESFS_TEST_FIND_RUNS
// to change it).
func findDiffRuns(t *testing.T) int {
	if s := os.Getenv("ESFS_TEST_FIND_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("ESFS_TEST_FIND_RUNS=%q: %v", s, err)
		}
		return n
	}
	return 1000
}

// TestFindDiff: esfs find prints what GNU find prints through a mount,
// for random expressions over a tree of every kind of file.
func TestFindDiff(t *testing.T) {
	if _, err := exec.LookPath("find"); err != nil {
		t.Skip("no find")
	}
	if out, _ := exec.Command("find", "--version").Output(); !bytes.Contains(out, []byte("GNU findutils")) {
		t.Skip("find is not GNU find")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners, devices)")
	}
	mounttest.QuickExit(t)
	seed := int64(testSeed(t))
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	tr := makeDiffTree(t, m.Dir, seed)
	rng := rand.New(rand.NewSource(seed))
	g := &findGen{rng: rng, tr: tr}
	cmds := make([]findCmd, findDiffRuns(t))
	for i := range cmds {
		cmds[i] = g.command()
	}
	first := 0
	if s := os.Getenv("ESFS_TEST_FIND_ONLY"); s != "" {
		// Replay one expression of the seed's run (its number in the
		// failure).
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= len(cmds) {
			t.Fatalf("ESFS_TEST_FIND_ONLY=%q: want an expression's number, below %d", s, len(cmds))
		}
		cmds, first = cmds[n:n+1], n
	}
	bin := plainBinary(t)
	start := time.Now()
	var (
		mu       sync.Mutex
		failures int
		next     int
		took     findTook
		wg       sync.WaitGroup
	)
	// Two at a time: each command waits on Elasticsearch or the mount as
	// much as it computes.
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= len(cmds) || failures >= 5
				mu.Unlock()
				if stop {
					return
				}
				if msg := compareFind(t, cmds[i], bin, f, &took); msg != "" {
					mu.Lock()
					failures++
					mu.Unlock()
					t.Errorf("seed %d, expression %d (ESFS_TEST_FIND_ONLY=%d): %s", seed, first+i, first+i, msg)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d expressions in %s (GNU find %s, esfs find %s, each in all)", len(cmds), time.Since(start).Round(time.Millisecond),
		took.gnu.Round(time.Millisecond), took.esfs.Round(time.Millisecond))
}

// compareFind runs c with GNU find and esfs find, and says how their
// outputs differ ("" if they do not). A time test near its boundary may
// change its answer between the two runs: GNU find runs again after esfs
// find, and when its answer changed the pair is tried anew.
func compareFind(t *testing.T, c findCmd, bin string, f *mounttest.FS, took *findTook) string {
	for attempt := 0; ; attempt++ {
		gnu := runFindCmd(t, c, "find", c.args)
		ours := runFindCmd(t, c, bin, append([]string{"find", "--es-url", f.URL, "--index", f.Index}, c.args...))
		took.add(gnu.took, ours.took)
		if gnu.same(ours) {
			return ""
		}
		again := runFindCmd(t, c, "find", c.args)
		if again.same(gnu) || attempt == 3 {
			return fmt.Sprintf("in %s, LC_ALL=%s\n  find %s\nGNU find (status %d), lines esfs find lacks:\n%sesfs find (status %d), lines GNU find lacks:\n%sGNU's stderr: %sesfs's stderr: %s",
				c.dir, c.locale, shellQuote(c.args), gnu.code, showDiff(gnu.out, ours.out), ours.code, showDiff(ours.out, gnu.out), gnu.stderr, ours.stderr)
		}
		t.Logf("find %s: GNU find's answer changed between runs (a time boundary): again", shellQuote(c.args))
	}
}

// findTook adds up the time GNU find and esfs find took.
type findTook struct {
	mu        sync.Mutex
	gnu, esfs time.Duration
}

func (f *findTook) add(gnu, esfs time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gnu += gnu
	f.esfs += esfs
}

// plainBinary builds esfs without the race detector: its start alone
// takes a tenth of a second with it, minutes over a thousand commands.
// (TestFind runs the race-built binary.)
func plainBinary(t *testing.T) string {
	if p := os.Getenv("ESFS_TEST_BINARY"); p != "" {
		return p
	}
	p := filepath.Join(t.TempDir(), "esfs")
	cmd := exec.Command("go", "build", "-o", p, ".")
	cmd.Dir = mounttest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return p
}

// findCmd is one find command line: where it runs, in which locale.
type findCmd struct {
	dir    string
	locale string
	args   []string
}

type findResult struct {
	out, stderr string
	code        int
	took        time.Duration
}

func (a findResult) same(b findResult) bool { return a.out == b.out && a.code == b.code }

func runFindCmd(t *testing.T, c findCmd, bin string, args []string) findResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL="+c.locale, "ELASTICSEARCH_URL=", "ESFS_INDEX=")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q hung", bin, args)
	}
	return findResult{out: out.String(), stderr: stderr.String(), code: code, took: time.Since(start)}
}

// showDiff is a's lines that are not in b (at most 20), and how many
// lines a has.
func showDiff(a, b string) string {
	in := map[string]bool{}
	for _, l := range strings.SplitAfter(b, "\n") {
		in[l] = true
	}
	var s strings.Builder
	lines := strings.SplitAfter(a, "\n")
	shown := 0
	for _, l := range lines {
		if l == "" || in[l] {
			continue
		}
		if shown++; shown > 20 {
			s.WriteString("  ...\n")
			break
		}
		fmt.Fprintf(&s, "  %q\n", l)
	}
	fmt.Fprintf(&s, "  (%d lines)\n", len(lines)-1)
	return s.String()
}

func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+_./,=") == "" {
			q[i] = a
		} else {
			q[i] = strconv.Quote(a)
		}
	}
	return strings.Join(q, " ")
}

// findGen makes random find command lines over a tree.
type findGen struct {
	rng *rand.Rand
	tr  *diffTree
}

func (g *findGen) pick(xs ...string) string { return xs[g.rng.Intn(len(xs))] }

func (g *findGen) command() findCmd {
	r := g.rng
	c := findCmd{dir: g.tr.Root, locale: "C.UTF-8"}
	if r.Intn(5) == 0 {
		c.locale = "C"
	}
	for n := r.Intn(3); n >= 0; n-- {
		if p := g.start(&c); p != "" {
			c.args = append(c.args, p)
		}
	}
	if r.Intn(3) == 0 {
		c.args = append(c.args, "-maxdepth", strconv.Itoa(r.Intn(5)))
	}
	if r.Intn(5) == 0 {
		c.args = append(c.args, "-mindepth", strconv.Itoa(r.Intn(4)))
	}
	if r.Intn(10) == 0 {
		c.args = append(c.args, "-depth")
	}
	if r.Intn(10) == 0 {
		c.args = append(c.args, "-daystart")
	}
	switch k := r.Intn(20); {
	case k < 2:
	case k < 11:
		c.args = append(c.args, g.expr(3)...)
	default:
		// Branches that end with an action, as such expressions are
		// written: GNU find's optimizer may move a test of another
		// branch before an action that more tests follow (a bug: see
		// the README), which esfs find does not imitate.
		branches := 1 + r.Intn(3)
		for branch := 0; branch < branches; branch++ {
			if branch > 0 {
				c.args = append(c.args, g.pick("-o", "-o", "-o", ","))
			}
			withTests := r.Intn(4) > 0
			if withTests {
				c.args = append(c.args, g.expr(2)...)
			}
			if r.Intn(6) > 0 || !withTests {
				c.args = append(c.args, g.action()...)
			}
		}
	}
	return c
}

// action is -print, -print0 or -printf.
func (g *findGen) action() []string {
	switch g.rng.Intn(4) {
	case 0:
		return []string{"-print"}
	case 1:
		return []string{"-print0"}
	}
	return []string{"-printf", g.format()}
}

// start is a starting point: the tree's root or a directory or file in
// it, named absolutely or from the directory the command runs in, with
// or without a trailing slash; now and then one that does not exist.
func (g *findGen) start(c *findCmd) string {
	r := g.rng
	tr := g.tr
	var rel string
	switch k := r.Intn(10); {
	case k < 4:
		rel = ""
	case k < 8:
		rel = tr.Dirs[r.Intn(len(tr.Dirs))]
	case k < 9:
		rel = tr.Files[r.Intn(len(tr.Files))]
	default:
		rel = "no-such-file"
	}
	switch r.Intn(4) {
	case 0:
		p := filepath.Join(tr.Root, rel)
		if r.Intn(4) == 0 {
			p += "/"
		}
		return p
	case 1:
		if rel == "" {
			return "."
		}
		return "./" + rel
	case 2:
		if rel == "" {
			return ""
		}
		if r.Intn(3) == 0 {
			return rel + "/"
		}
		return rel
	}
	// From a directory of the tree.
	d := tr.Dirs[r.Intn(len(tr.Dirs))]
	c.dir = filepath.Join(tr.Root, d)
	return "."
}

// expr is a random expression of at most depth levels of operators.
func (g *findGen) expr(depth int) []string {
	r := g.rng
	if depth == 0 || r.Intn(3) == 0 {
		return g.primary()
	}
	l, rt := g.expr(depth-1), g.expr(depth-1)
	switch k := r.Intn(12); {
	case k < 4:
		return append(l, rt...) // implicit -a
	case k < 5:
		return append(append(l, g.pick("-a", "-and")), rt...)
	case k < 8:
		return append(append(l, g.pick("-o", "-or")), rt...)
	case k < 9:
		return append(append(l, ","), rt...)
	case k < 10:
		return append([]string{g.pick("!", "-not")}, l...)
	}
	return append(append([]string{"("}, l...), ")")
}

func (g *findGen) primary() []string {
	r := g.rng
	tr := g.tr
	num := func(xs ...int) string {
		return g.pick("", "", "+", "-") + strconv.Itoa(xs[r.Intn(len(xs))])
	}
	switch r.Intn(24) {
	case 0, 1:
		return []string{g.pick("-name", "-iname"), g.pattern()}
	case 2:
		return []string{g.pick("-path", "-ipath"), "*" + g.pattern() + g.pick("", "*", "/*")}
	case 3, 4:
		types := []string{"f", "d", "l", "p", "s", "c", "b"}
		t := g.pick(types...)
		if r.Intn(4) == 0 {
			t += "," + g.pick(types...)
			if t[0] == t[2] {
				t = t[:1]
			}
		}
		return []string{"-type", t}
	case 5, 6:
		n := num(0, 1, 2, 3, 4, 10, 100, 511, 512, 513, 1023, 1024, 1025, 2048, 4096, 5)
		return []string{"-size", n + g.pick("", "c", "b", "w", "k", "M", "G")}
	case 7, 8:
		n := num(0, 1, 2, 6, 7, 8, 29, 30, 31, 399, 400, 401, 3649, 3650, 3651, 20000)
		if r.Intn(6) == 0 {
			n += ".5"
		}
		return []string{g.pick("-mtime", "-mtime", "-atime", "-ctime"), n}
	case 9, 10:
		return []string{g.pick("-mmin", "-mmin", "-amin", "-cmin"), num(0, 1, 2, 59, 60, 61, 89, 90, 91, 1439, 1440, 1441, 2880)}
	case 11:
		ref := filepath.Join(tr.Root, tr.Files[r.Intn(len(tr.Files))])
		return []string{g.pick("-newer", "-newer", "-anewer", "-cnewer"), ref}
	case 12:
		return []string{"-user", g.pick("root", "daemon", "bin", "nobody", "12345", "0")}
	case 13:
		return []string{"-group", g.pick("root", "daemon", "bin", "nogroup", "54321", "0")}
	case 14:
		return []string{g.pick("-uid", "-gid"), num(0, 1, 2, 1000, 12345, 54321, 65534)}
	case 15, 16:
		return []string{"-perm", g.pick("644", "755", "-644", "/644", "-u+s", "/g+w", "u=rwx,g=rx,o=rx", "/o+t", "-4000",
			"7777", "/111", "a+X", "-a+X", "/a+X", "u+s,g+s", "000", "-0", "/u=w,g=w", "-o=r", "g+t", "u=g", "/6000", "1777", "-1000", "o-w")}
	case 17:
		return []string{"-empty"}
	case 18:
		return []string{"-links", num(0, 1, 2, 3, 4)}
	case 19:
		return []string{g.pick("-true", "-false", "-nouser", "-nogroup")}
	case 20:
		return []string{g.pick("-lname", "-ilname"), g.pick("*", "a", "*passwd", "nowhere", "t*", "*/*", "?")}
	case 21:
		return []string{"-depth"}
	}
	return []string{g.pick("-name", "-iname", "-type"), g.pick("*", "?", "d", "f")}
}

// pattern is a shell pattern, mostly made from a name of the tree.
func (g *findGen) pattern() string {
	r := g.rng
	if r.Intn(8) == 0 {
		return g.pick("*", "?", "*.txt", "[a-f]*", "[!a-z]*", "*[0-9]", "*[[:digit:]]", "*[[:upper:]]*", "w0?", "level1*", "\\*", "*\\?*", "[", "*é*", "?????", "*\xff*", "[]a]*", "[!]]*")
	}
	name := []rune(g.tr.Names[r.Intn(len(g.tr.Names))])
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		switch k := r.Intn(12); {
		case k == 0:
			b.WriteByte('?')
		case k == 1:
			b.WriteByte('*')
			i += r.Intn(3)
		case k == 2:
			fmt.Fprintf(&b, "[%c%c]", name[i], 'a'+r.Intn(26))
		case k == 3 && name[i] < 128:
			b.WriteString(strings.ToUpper(string(name[i])))
		default:
			if strings.ContainsRune("*?[\\", name[i]) {
				b.WriteByte('\\')
			}
			b.WriteRune(name[i])
		}
	}
	return b.String()
}

// format is a -printf format of random directives.
func (g *findGen) format() string {
	r := g.rng
	directives := []string{"%p", "%P", "%f", "%h", "%H", "%d", "%s", "%b", "%k", "%n", "%i", "%l", "%m", "%M", "%u", "%g",
		"%U", "%G", "%y", "%S", "%a", "%c", "%t", "%T@", "%A@", "%C@", "%TY-%Tm-%Td", "%TT", "%T+", "%Tc", "%Tk", "%TZ",
		"%10s", "%-8u|", "%.3f", "%#m", "%05d", "%%", "\\t", "\\0", "\\\\", "%F"}
	var b strings.Builder
	for n := 1 + r.Intn(4); n > 0; n-- {
		b.WriteString(directives[r.Intn(len(directives))])
		b.WriteByte(' ')
	}
	b.WriteString("\\n")
	return b.String()
}
