package cmd

// Parsing find's expression: GNU find's primaries and operators, each
// turned into what the index can answer (store.Cond) and what is checked
// on the client.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/esfs/esfs/store"
)

// findParser reads the expression's arguments.
type findParser struct {
	args      []string
	i         int
	env       findEnv
	x         *findExpr
	dayStart  time.Time // -daystart's start of today; zero without it
	hasAction bool
	sawTest   bool // a test or action came before an option (GNU warns)
}

// isExprStart reports whether arg begins the expression: GNU find takes
// the arguments before the first such one as starting points.
func isExprStart(arg string) bool {
	return arg == "(" || arg == "!" || strings.HasPrefix(arg, "-") && len(arg) > 1
}

// parseFind parses find's arguments (after esfs's own flags).
func parseFind(args []string, env findEnv) (*findExpr, error) {
	x := &findExpr{maxDepth: -1}
	i := 0
	for ; i < len(args) && !isExprStart(args[i]); i++ {
		x.paths = append(x.paths, args[i])
	}
	p := &findParser{args: args, i: i, env: env, x: x}
	var root *fnode
	if _, ok := p.peek(); ok {
		n, err := p.parseComma()
		if err != nil {
			return nil, err
		}
		if p.i < len(args) {
			switch a := args[p.i]; a {
			case ")":
				return nil, findErrorf("invalid expression; you have too many ')'")
			default:
				return nil, findErrorf("paths must precede expression: `%s'", a)
			}
		}
		root = gnuCommaOrder(n)
	}
	print := &fnode{kind: fAction, name: "-print", test: func(fr *findRun, e *fentry) bool {
		fr.out.WriteString(e.path)
		fr.out.WriteByte('\n')
		return true
	}}
	switch {
	case root == nil:
		root = print
	case !p.hasAction:
		root = &fnode{kind: fAnd, l: root, r: print}
	}
	x.root = root
	return x, nil
}

// peek is the next word of the expression. -daystart is no word of it
// for GNU find (unlike its other options, which are true): it is
// applied, and skipped.
func (p *findParser) peek() (string, bool) {
	for p.i < len(p.args) && p.args[p.i] == "-daystart" {
		if p.dayStart.IsZero() {
			t := p.env.now
			p.dayStart = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
		}
		p.i++
	}
	if p.i < len(p.args) {
		return p.args[p.i], true
	}
	return "", false
}

// parseComma: expr [, expr]... (lowest precedence).
func (p *findParser) parseComma() (*fnode, error) {
	l, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for {
		a, ok := p.peek()
		if !ok || a != "," {
			return l, nil
		}
		p.i++
		if _, ok := p.peek(); !ok {
			return nil, findErrorf("expected an expression after ','")
		}
		r, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		l = &fnode{kind: fComma, l: l, r: r}
	}
}

func (p *findParser) parseOr() (*fnode, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for {
		a, ok := p.peek()
		if !ok || a != "-o" && a != "-or" {
			return l, nil
		}
		p.i++
		if _, ok := p.peek(); !ok {
			return nil, findErrorf("expected an expression after '%s'", a)
		}
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &fnode{kind: fOr, l: l, r: r}
	}
}

func (p *findParser) parseAnd() (*fnode, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		a, ok := p.peek()
		if !ok || a == "-o" || a == "-or" || a == "," || a == ")" {
			return l, nil
		}
		if a == "-a" || a == "-and" {
			p.i++
			if _, ok := p.peek(); !ok {
				return nil, findErrorf("expected an expression after '%s'", a)
			}
		}
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = &fnode{kind: fAnd, l: l, r: r}
	}
}

func (p *findParser) parseUnary() (*fnode, error) {
	a, ok := p.peek()
	if !ok {
		return nil, findErrorf("invalid expression")
	}
	switch a {
	case "!", "-not":
		p.i++
		if _, ok := p.peek(); !ok {
			return nil, findErrorf("expected an expression after '%s'", a)
		}
		n, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		return &fnode{kind: fNot, l: n}, nil
	case "(":
		p.i++
		if b, ok := p.peek(); ok && b == ")" {
			return nil, findErrorf("invalid expression; empty parentheses are not allowed.")
		}
		n, err := p.parseComma()
		if err != nil {
			return nil, err
		}
		if b, ok := p.peek(); !ok || b != ")" {
			return nil, findErrorf("invalid expression; I was expecting to find a ')' somewhere but did not see one.")
		}
		p.i++
		return n, nil
	case "-o", "-or", "-a", "-and", ",":
		return nil, findErrorf("invalid expression; you have used a binary operator '%s' with nothing before it.", a)
	case ")":
		return nil, findErrorf("invalid expression; you have too many ')'")
	}
	if !strings.HasPrefix(a, "-") {
		return nil, findErrorf("paths must precede expression: `%s'", a)
	}
	p.i++
	return p.primary(a)
}

// arg takes the argument of primary name.
func (p *findParser) arg(name string) (string, error) {
	if p.i >= len(p.args) {
		return "", findErrorf("missing argument to `%s'", name)
	}
	p.i++
	return p.args[p.i-1], nil
}

// unsupported names GNU find's primaries that esfs find does not have,
// with what to do instead.
var unsupported = map[string]string{
	"-exec": "pipe the paths to xargs: esfs find ... -print0 | xargs -0 COMMAND", "-execdir": "pipe the paths to xargs",
	"-ok": "pipe the paths to xargs", "-okdir": "pipe the paths to xargs",
	"-delete": "pipe the paths to xargs: esfs find ... -print0 | xargs -0 rm",
	"-prune":  "filter by -path instead", "-quit": "pipe the output to head -n 1",
	"-fprint": "redirect the output", "-fprint0": "redirect the output", "-fprintf": "redirect the output", "-fls": "redirect the output",
	"-regex": "use -name or -path", "-iregex": "use -iname or -ipath", "-regextype": "use -name or -path",
	"-samefile": "use -inum", "-xtype": "use -type", "-readable": "", "-writable": "", "-executable": "",
	"-fstype": "", "-context": "", "-used": "", "-newerXY": "", "-follow": "esfs find never follows symbolic links",
	"-L": "esfs find never follows symbolic links", "-H": "esfs find never follows symbolic links",
	"-ls": "use -printf '%i %k %M %n %u %g %s %t %p\\n'",
}

// primary parses the primary a (its arguments follow).
func (p *findParser) primary(a string) (*fnode, error) {
	env := p.env
	test := func(when, unless sides, f func(fr *findRun, e *fentry) bool) *fnode {
		p.sawTest = true
		cost, ok := primaryCost[a]
		if !ok {
			cost = costStat
		}
		return &fnode{kind: fTest, name: a, test: f, whenTrue: when, whenFalse: unless, cost: cost}
	}
	attrTest := func(when, unless sides, f func(fr *findRun, e *fentry) bool) *fnode {
		p.x.needs.attr = true
		return test(when, unless, f)
	}
	option := func() *fnode {
		if p.sawTest {
			p.x.warnings = append(p.x.warnings, fmt.Sprintf("warning: you have specified the global option %s after the argument %s, but global options are not positional, i.e., %s affects tests specified before it as well as those specified after it.  Please specify global options before other arguments.", a, p.args[max(0, p.i-2)], a))
		}
		return &fnode{kind: fTest, name: a, test: func(*findRun, *fentry) bool { return true }, whenTrue: always, whenFalse: never, cost: costNothing}
	}
	switch a {
	case "-print", "-print0":
		p.hasAction = true
		end := byte('\n')
		if a == "-print0" {
			end = 0
		}
		return &fnode{kind: fAction, name: a, test: func(fr *findRun, e *fentry) bool {
			fr.out.WriteString(e.path)
			fr.out.WriteByte(end)
			return true
		}}, nil
	case "-printf":
		format, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		segs, err := parsePrintf(format, func(w string) { p.x.warnings = append(p.x.warnings, w) })
		if err != nil {
			return nil, findError{err.Error()}
		}
		if printfNeedsAttr(segs) {
			p.x.needs.attr = true
		}
		p.hasAction = true
		return &fnode{kind: fAction, name: a, test: func(fr *findRun, e *fentry) bool {
			fr.writePrintf(segs, e)
			return true
		}}, nil
	case "-true":
		return test(always, never, func(*findRun, *fentry) bool { return true }), nil
	case "-false":
		return test(never, always, func(*findRun, *fentry) bool { return false }), nil
	case "-name", "-iname":
		pat, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		if strings.Contains(pat, "/") {
			p.x.warnings = append(p.x.warnings, fmt.Sprintf("warning: '%s' matches against basenames only, but the given pattern contains a directory separator ('/'), thus the expression will evaluate to false all the time.  Did you mean '-wholename'?", a))
		}
		fold := a == "-iname"
		when, unless := onPath(store.NameGlob(pat, fold)), always
		if lit, ok := literalPattern(pat); ok && !fold {
			when, unless = onPath(store.NameIs(lit)), onPath(store.NotCond(store.NameIs(lit)))
		}
		return test(when, unless, func(fr *findRun, e *fentry) bool {
			name := e.d.Name
			if e.depth == 0 {
				name = nameOfPath(e.path)
			}
			return fnmatch(pat, name, fold, env.chars)
		}), nil
	case "-path", "-ipath", "-wholename", "-iwholename":
		pat, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		fold := a == "-ipath" || a == "-iwholename"
		return test(always, always, func(fr *findRun, e *fentry) bool {
			return fnmatch(pat, e.path, fold, env.chars)
		}), nil
	case "-lname", "-ilname":
		pat, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		fold := a == "-ilname"
		link := onBoth(store.TypeIs(store.TypeSymlink))
		return attrTest(link, always, func(fr *findRun, e *fentry) bool {
			return e.attr.Type == store.TypeSymlink && fnmatch(pat, e.attr.Target, fold, env.chars)
		}), nil
	case "-type":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		types, err := parseTypes(arg)
		if err != nil {
			return nil, err
		}
		c := store.TypeIs(types...)
		return test(onBoth(c), onBoth(store.NotCond(c)), func(fr *findRun, e *fentry) bool {
			for _, t := range types {
				if e.d.Type == t {
					return true
				}
			}
			return false
		}), nil
	case "-size":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		lo, hi, err := parseSize(arg)
		if err != nil {
			return nil, err
		}
		c := store.InodeRange(store.FieldSize, lo, hi)
		return attrTest(onInode(c), onInode(store.NotCond(c)), func(fr *findRun, e *fentry) bool {
			return lo <= e.attr.Size && e.attr.Size <= hi
		}), nil
	case "-empty":
		p.x.needs.empty = true
		file0 := store.AllOf(store.TypeIs(store.TypeFile), store.InodeRange(store.FieldSize, 0, 0))
		when := sides{store.TypeIs(store.TypeFile, store.TypeDir), store.AnyOf(file0, store.TypeIs(store.TypeDir))}
		return attrTest(when, onInode(store.NotCond(file0)), func(fr *findRun, e *fentry) bool {
			switch e.d.Type {
			case store.TypeDir:
				return e.empty
			case store.TypeFile:
				return e.attr.Size == 0
			}
			return false
		}), nil
	case "-mtime", "-atime", "-ctime", "-mmin", "-amin", "-cmin":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		field, perMinute := timeFieldOf(a)
		w, err := p.timeWindow(arg, perMinute)
		if err != nil {
			return nil, findErrorf("invalid argument `%s' to `%s'", arg, a)
		}
		when, unless := w.pushdown(field)
		get := timeGetter(field)
		return attrTest(when, unless, func(fr *findRun, e *fentry) bool { return w.holds(get(&e.attr)) }), nil
	case "-newer", "-anewer", "-cnewer":
		ref, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		st, err := env.lstat(ref)
		if err != nil {
			return nil, findErrorf("%s", statError(ref, err))
		}
		refNs := mtimeNs(st)
		field := map[string]store.InodeField{"-newer": store.FieldMtime, "-anewer": store.FieldAtime, "-cnewer": store.FieldCtime}[a]
		get := timeGetter(field)
		c := store.InodeRange(field, refNs+1, math.MaxInt64)
		return attrTest(onInode(c), onInode(store.NotCond(c)), func(fr *findRun, e *fentry) bool { return get(&e.attr) > refNs }), nil
	case "-uid", "-gid", "-links", "-inum":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		lo, hi, ok := parseNumCmp(arg)
		if !ok {
			return nil, findErrorf("invalid argument `%s' to `%s'", arg, a)
		}
		field := map[string]store.InodeField{"-uid": store.FieldUid, "-gid": store.FieldGid, "-links": store.FieldNlink, "-inum": store.FieldIno}[a]
		get := numGetter(field)
		c := uintRange(field, lo, hi)
		return attrTest(onInode(c), onInode(store.NotCond(c)), func(fr *findRun, e *fentry) bool {
			v := get(&e.attr)
			return lo <= v && v <= hi
		}), nil
	case "-user", "-group":
		name, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		lookup, field, what := env.lookupU, store.FieldUid, "user"
		if a == "-group" {
			lookup, field, what = env.lookupG, store.FieldGid, "group"
		}
		id, ok := lookup(name)
		if !ok {
			n, err := strconv.ParseUint(name, 10, 32)
			if err != nil || name == "" || strings.TrimLeft(name, "0123456789") != "" {
				if name == "" {
					return nil, findErrorf("The argument to -%s should not be empty", what)
				}
				return nil, findErrorf("‘%s’ is not the name of a known %s", name, what)
			}
			id = uint32(n)
		}
		get := numGetter(field)
		c := store.InodeRange(field, int64(id), int64(id))
		return attrTest(onInode(c), onInode(store.NotCond(c)), func(fr *findRun, e *fentry) bool { return get(&e.attr) == uint64(id) }), nil
	case "-nouser", "-nogroup":
		user := a == "-nouser"
		return attrTest(always, always, func(fr *findRun, e *fentry) bool {
			if user {
				return !fr.ids.userKnown(e.attr.Uid)
			}
			return !fr.ids.groupKnown(e.attr.Gid)
		}), nil
	case "-perm":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		pm, err := parsePerm(arg)
		if err != nil {
			return nil, err
		}
		if pm.warning != "" {
			p.x.warnings = append(p.x.warnings, pm.warning)
		}
		when, unless := pm.pushdown()
		return attrTest(when, unless, func(fr *findRun, e *fentry) bool { return pm.holds(e.attr.Type, e.attr.Mode) }), nil
	case "-maxdepth", "-mindepth":
		arg, err := p.arg(a)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(arg)
		if arg == "" || strings.TrimLeft(arg, "0123456789") != "" || err != nil {
			return nil, findErrorf("Expected a positive decimal integer argument to %s, but got ‘%s’", a, arg)
		}
		if a == "-maxdepth" {
			p.x.maxDepth = n
		} else {
			p.x.minDepth = n
		}
		return option(), nil
	case "-depth", "-d":
		p.x.depth = true
		return option(), nil
	case "-noleaf", "-xdev", "-mount", "-ignore_readdir_race", "-noignore_readdir_race", "-warn", "-nowarn", "-P":
		return option(), nil
	}
	if why, ok := unsupported[a]; ok {
		if why != "" {
			why = ": " + why
		}
		return nil, findErrorf("%s is not supported by esfs find%s", a, why)
	}
	return nil, findErrorf("unknown predicate `%s'", a)
}

// literalPattern is pattern's one name if it has no wildcards (its
// backslashes removed); fnmatch then compares bytes.
func literalPattern(pattern string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*', '?', '[':
			return "", false
		case '\\':
			if i+1 == len(pattern) {
				return "", false
			}
			i++
			b.WriteByte(pattern[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// parseTypes reads -type's letters: one, or several separated by commas.
func parseTypes(arg string) ([]store.FileType, error) {
	letters := map[byte]store.FileType{'f': store.TypeFile, 'd': store.TypeDir, 'l': store.TypeSymlink,
		'p': store.TypeFifo, 's': store.TypeSocket, 'c': store.TypeCharDev, 'b': store.TypeBlockDev}
	if arg == "" {
		return nil, findErrorf("Arguments to -type should contain at least one letter")
	}
	var types []store.FileType
	seen := map[byte]bool{}
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if i%2 == 1 {
			if c != ',' {
				return nil, findErrorf("Must separate multiple arguments to -type using: ','")
			}
			if i == len(arg)-1 {
				return nil, findErrorf("Last file type in list argument to -type is missing, i.e., list is ending on: ','")
			}
			continue
		}
		t, ok := letters[c]
		if !ok {
			if c == 'D' {
				return nil, findErrorf("-type D (a door) never matches in esfs")
			}
			return nil, findErrorf("Unknown argument to -type: %c", c)
		}
		if seen[c] {
			return nil, findErrorf("Duplicate file type ‘%c’ in the argument list to -type", c)
		}
		seen[c] = true
		types = append(types, t)
	}
	return types, nil
}

// parseNumCmp reads [+-]N: the range of values it means.
func parseNumCmp(arg string) (lo, hi uint64, ok bool) {
	s := arg
	cmp := byte(0)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		cmp, s = s[0], s[1:]
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	switch cmp {
	case '+':
		if n == math.MaxUint64 {
			return 1, 0, true
		}
		return n + 1, math.MaxUint64, true
	case '-':
		if n == 0 {
			return 1, 0, true // nothing is below 0
		}
		return 0, n - 1, true
	}
	return n, n, true
}

// uintRange is field in [lo, hi] as a condition on inode documents.
func uintRange(field store.InodeField, lo, hi uint64) store.Cond {
	if lo > hi || lo > math.MaxInt64 {
		return store.FalseCond
	}
	return store.InodeRange(field, int64(lo), int64(min(hi, math.MaxInt64)))
}

// parseSize reads -size's [+-]N[bcwkMG]: the sizes in bytes it means.
// GNU counts a size in units rounded up: -size -1M is an empty file
// only, -size 2k a size from 1025 to 2048 bytes.
func parseSize(arg string) (lo, hi int64, err error) {
	s := arg
	cmp := byte(0)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		cmp, s = s[0], s[1:]
	}
	unit := int64(512)
	if s != "" {
		units := map[byte]int64{'b': 512, 'c': 1, 'w': 2, 'k': 1024, 'M': 1 << 20, 'G': 1 << 30}
		last := s[len(s)-1]
		if last < '0' || last > '9' {
			u, ok := units[last]
			if !ok {
				return 0, 0, findErrorf("invalid -size type `%c'", last)
			}
			unit, s = u, s[:len(s)-1]
		}
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, 0, findErrorf("invalid argument `%s' to `-size'", arg)
	}
	u, perr := strconv.ParseUint(s, 10, 64)
	if perr != nil {
		return 0, 0, findErrorf("Invalid argument `%s' to -size", arg)
	}
	n := int64(min(u, math.MaxInt64)) // sizes are below that many units
	// The sizes whose count of units, rounded up, is n: (n-1)*unit+1 to
	// n*unit; 0 for n = 0.
	upTo := func(n int64) int64 { // the largest size of n units
		if n > math.MaxInt64/unit {
			return math.MaxInt64
		}
		return n * unit
	}
	above := func(n int64) int64 { // the smallest size of more than n units
		if u := upTo(n); u < math.MaxInt64 {
			return u + 1
		}
		return math.MaxInt64 // beyond any size: lo > hi below, or only the largest
	}
	switch cmp {
	case '+':
		if upTo(n) == math.MaxInt64 {
			return 1, 0, nil
		}
		return above(n), math.MaxInt64, nil
	case '-':
		if n == 0 {
			return 1, 0, nil
		}
		return 0, upTo(n - 1), nil
	}
	if n == 0 {
		return 0, 0, nil
	}
	if upTo(n-1) == math.MaxInt64 {
		return 1, 0, nil
	}
	return above(n - 1), upTo(n), nil
}

// timeFieldOf is the time a time test reads, and whether it counts
// minutes.
func timeFieldOf(primary string) (store.InodeField, bool) {
	f := map[byte]store.InodeField{'m': store.FieldMtime, 'a': store.FieldAtime, 'c': store.FieldCtime}[primary[1]]
	return f, strings.HasSuffix(primary, "min")
}

func timeGetter(f store.InodeField) func(a *store.Inode) int64 {
	switch f {
	case store.FieldAtime:
		return func(a *store.Inode) int64 { return a.Atime }
	case store.FieldCtime:
		return func(a *store.Inode) int64 { return a.Ctime }
	}
	return func(a *store.Inode) int64 { return a.Mtime }
}

func numGetter(f store.InodeField) func(a *store.Inode) uint64 {
	switch f {
	case store.FieldUid:
		return func(a *store.Inode) uint64 { return uint64(a.Uid) }
	case store.FieldGid:
		return func(a *store.Inode) uint64 { return uint64(a.Gid) }
	case store.FieldNlink:
		return func(a *store.Inode) uint64 { return uint64(statNlink(*a)) }
	}
	return func(a *store.Inode) uint64 { return a.Ino }
}

// timeWindow is a time test as GNU find computes it: a reference time
// and a comparison, judged in floating point.
type timeWindow struct {
	cmp    byte // '>' (newer than ref), '<' (older), '=' (within window after ref)
	refSec int64
	refNs  int64
	window float64
}

// timeWindow reads the argument of a time test: [+-]N days (or minutes),
// fractions allowed, against the start of find (or of today with
// -daystart) as GNU's get_relative_timestamp.
func (p *findParser) timeWindow(arg string, perMinute bool) (timeWindow, error) {
	const day = 86400
	s := arg
	cmp := byte('=')
	if s != "" && (s[0] == '+' || s[0] == '-') {
		cmp = s[0]
		s = s[1:]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || s == "" || math.IsNaN(v) {
		return timeWindow{}, errors.New("not a number")
	}
	// The origin: a day before the start (or the start of today), a day
	// later for minutes, less a second for -N days.
	var originSec, originNs int64
	if p.dayStart.IsZero() {
		originSec, originNs = p.env.now.Unix()-day, int64(p.env.now.Nanosecond())
	} else {
		originSec, originNs = p.dayStart.Unix(), 0
	}
	unit := float64(day)
	window := float64(day)
	if perMinute {
		originSec += day
		unit, window = 60, 60
	} else if cmp == '-' {
		originSec += day - 1
	}
	// Beyond 10^15 seconds (30 million years) every time stored is on
	// the same side: GNU find's answers for such numbers, without its
	// arithmetic overflowing here.
	whole, frac := math.Modf(max(-1e15, min(1e15, v*unit)))
	nanosec := frac * 1e9
	w := timeWindow{window: window}
	w.refSec = originSec - int64(whole)
	w.refNs = int64(float64(originNs) - nanosec)
	if float64(originNs) < nanosec {
		w.refNs += 1e9
		w.refSec--
	}
	switch cmp {
	case '+':
		w.cmp = '<'
	case '-':
		w.cmp = '>'
	default:
		w.cmp = '='
	}
	return w, nil
}

// holds judges a time of a file (in nanoseconds since 1970).
func (w timeWindow) holds(ns int64) bool {
	sec, nsec := timeOf(ns)
	if w.cmp != '=' {
		if sec == w.refSec && nsec == w.refNs {
			return false
		}
		d := float64(sec-w.refSec) + 1e-9*float64(nsec-w.refNs)
		if w.cmp == '>' {
			return d >= 0
		}
		return d < 0
	}
	d := float64(sec-w.refSec) + 1e-9*float64(nsec-w.refNs)
	return d > 0 && d <= w.window
}

// pushdown is the window as conditions on field, a little wider than
// the floating point comparison (a millisecond), so that they hold for
// at least the files it holds for (or does not hold for).
func (w timeWindow) pushdown(field store.InodeField) (when, unless sides) {
	const slop = int64(time.Millisecond)
	var ref int64 // the reference time in nanoseconds, beyond their range at its ends
	switch {
	case w.refSec <= math.MinInt64/int64(time.Second):
		ref = math.MinInt64
	case w.refSec >= math.MaxInt64/int64(time.Second):
		ref = math.MaxInt64
	default:
		ref = w.refSec*1e9 + w.refNs
	}
	switch w.cmp {
	case '>':
		return onInode(store.InodeRange(field, addNs(ref, -slop), math.MaxInt64)),
			onInode(store.InodeRange(field, math.MinInt64, addNs(ref, slop)))
	case '<':
		return onInode(store.InodeRange(field, math.MinInt64, addNs(ref, slop))),
			onInode(store.InodeRange(field, addNs(ref, -slop), math.MaxInt64))
	}
	end := addNs(ref, int64(w.window)*1e9)
	inside := store.InodeRange(field, addNs(ref, -slop), addNs(end, slop))
	core := store.InodeRange(field, addNs(ref, slop), addNs(end, -slop))
	return onInode(inside), onInode(store.NotCond(core))
}

// addNs saturates instead of wrapping.
func addNs(a, b int64) int64 {
	s := a + b
	if b > 0 && s < a {
		return math.MaxInt64
	}
	if b < 0 && s > a {
		return math.MinInt64
	}
	return s
}

// mtimeNs is a local file's mtime in nanoseconds.
func mtimeNs(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Mtim.Sec*1e9 + s.Mtim.Nsec
	}
	return st.ModTime().UnixNano()
}

// statError is GNU's message for a file it could not stat.
func statError(path string, err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Sprintf("‘%s’: %s", path, errnoText(errno))
	}
	return fmt.Sprintf("‘%s’: %v", path, err)
}

// errnoText is strerror's text: Go's, capitalized as glibc's.
func errnoText(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
