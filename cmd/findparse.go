package cmd

// Parsing find's expression: GNU find's primaries and operators, each
// turned into what the index can answer (store.Cond) and what is checked
// on the client.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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
