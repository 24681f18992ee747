package cmd

// find's expression: GNU find's syntax (primaries, operators and their
// precedence, options anywhere), parsed into a tree that judges one file
// at a time exactly as GNU find does, and that says which documents may
// produce output at all (the conditions pushed down to Elasticsearch).

import (
	"fmt"
	"os"
	"time"

	"github.com/esfs/esfs/store"
)

// fkind is what a node of the expression is.
type fkind uint8

const (
	fAnd fkind = iota
	fOr
	fNot
	fComma
	fTest   // a test: true or false for a file
	fAction // prints; always true
)

// fnode is one node of a find expression.
type fnode struct {
	kind fkind
	l, r *fnode // operands (fNot: l)
	name string // the primary as typed, for messages
	// test judges a file (fTest, fAction: an action prints as it judges).
	test func(fr *findRun, e *fentry) bool
	// whenTrue and whenFalse hold for at least the files the test is true
	// (false) for: conditions on their path and inode documents.
	whenTrue, whenFalse sides
	// cost is what GNU find's optimizer thinks the test costs (see
	// gnuCommaOrder).
	cost int
}

// GNU find's evaluation costs (its enum EvaluationCost), of the tests
// esfs find has.
const (
	costNothing  = 0
	costInodeNum = 1
	costType     = 2
	costStat     = 3
	costLinkName = 4
)

// primaryCost is the cost of each primary; every other is costStat.
var primaryCost = map[string]int{
	"-name": costNothing, "-iname": costNothing, "-path": costNothing, "-ipath": costNothing,
	"-wholename": costNothing, "-iwholename": costNothing, "-true": costNothing, "-false": costNothing,
	"-type": costType, "-inum": costInodeNum, "-lname": costLinkName, "-ilname": costLinkName,
}

// worstCost is the highest cost in n.
func (n *fnode) worstCost() int {
	if n == nil {
		return costNothing
	}
	return max(n.cost, n.l.worstCost(), n.r.worstCost())
}

// sideEffects reports whether n prints.
func (n *fnode) sideEffects() bool {
	return n != nil && (n.kind == fAction || n.l.sideEffects() || n.r.sideEffects())
}

// gnuCommaOrder orders the operands of each chain of commas as GNU find
// 4.9 evaluates them. Its optimizer (do_arm_swaps, meant for -a and -o,
// where the order changes nothing but the work) goes once along the
// chain from its last operand to its first, and swaps each pair of
// neighbouring operands without actions whose left one costs more: so
// `-size +5k , -type d` has the value of -size, `-size +5k , -name x ,
// -type d` that of -type (found by running GNU find). The output is GNU
// find's only if the expression is evaluated in GNU find's order.
func gnuCommaOrder(n *fnode) *fnode {
	if n == nil {
		return nil
	}
	if n.kind != fComma {
		n.l, n.r = gnuCommaOrder(n.l), gnuCommaOrder(n.r)
		return n
	}
	var ops []*fnode
	var flatten func(c *fnode)
	flatten = func(c *fnode) {
		if c.kind == fComma {
			flatten(c.l)
			ops = append(ops, c.r)
			return
		}
		ops = append(ops, c)
	}
	flatten(n)
	for i, op := range ops {
		ops[i] = gnuCommaOrder(op)
	}
	for j := len(ops) - 1; j > 0; j-- {
		l, r := ops[j-1], ops[j]
		if !l.sideEffects() && !r.sideEffects() && l.worstCost() > r.worstCost() {
			ops[j-1], ops[j] = r, l
		}
	}
	out := ops[0]
	for _, op := range ops[1:] {
		out = &fnode{kind: fComma, l: out, r: op}
	}
	return out
}

// sides is a condition on a file's path document and on its inode
// document, both of which must hold.
type sides struct{ path, inode store.Cond }

var (
	always = sides{store.TrueCond, store.TrueCond}
	never  = sides{store.FalseCond, store.FalseCond}
)

func (a sides) and(b sides) sides {
	return sides{store.AllOf(a.path, b.path), store.AllOf(a.inode, b.inode)}
}

// or holds where either holds: side by side, a superset.
func (a sides) or(b sides) sides {
	if a.isFalse() {
		return b
	}
	if b.isFalse() {
		return a
	}
	return sides{store.AnyOf(a.path, b.path), store.AnyOf(a.inode, b.inode)}
}

func (a sides) isFalse() bool { return a.path.IsFalse() || a.inode.IsFalse() }

// onPath is c on path documents; onInode, on inode documents; onBoth, a
// condition that both kinds of document can test (the file type).
func onPath(c store.Cond) sides  { return sides{c, store.TrueCond} }
func onInode(c store.Cond) sides { return sides{store.TrueCond, c} }
func onBoth(c store.Cond) sides  { return sides{c, c} }

// truth is whenTrue and whenFalse of n.
func (n *fnode) truth() (t, f sides) {
	switch n.kind {
	case fAnd:
		lt, lf := n.l.truth()
		rt, rf := n.r.truth()
		return lt.and(rt), lf.or(lt.and(rf))
	case fOr:
		lt, lf := n.l.truth()
		rt, rf := n.r.truth()
		return lt.or(lf.and(rt)), lf.and(rf)
	case fNot:
		t, f := n.l.truth()
		return f, t
	case fComma:
		n.l.truth()
		return n.r.truth()
	case fAction:
		return always, never
	}
	return n.whenTrue, n.whenFalse
}

// acts holds for at least the files for which an action of n runs.
func (n *fnode) acts() sides {
	switch n.kind {
	case fAnd:
		lt, _ := n.l.truth()
		return n.l.acts().or(lt.and(n.r.acts()))
	case fOr:
		_, lf := n.l.truth()
		return n.l.acts().or(lf.and(n.r.acts()))
	case fNot:
		return n.l.acts()
	case fComma:
		return n.l.acts().or(n.r.acts())
	case fAction:
		return always
	}
	return never
}

// eval judges e, running the actions on its way, as GNU find does:
// -a and -o short-circuit, the comma evaluates both sides.
func (n *fnode) eval(fr *findRun, e *fentry) bool {
	switch n.kind {
	case fAnd:
		return n.l.eval(fr, e) && n.r.eval(fr, e)
	case fOr:
		return n.l.eval(fr, e) || n.r.eval(fr, e)
	case fNot:
		return !n.l.eval(fr, e)
	case fComma:
		n.l.eval(fr, e)
		return n.r.eval(fr, e)
	}
	return n.test(fr, e)
}

// findNeeds says what judging the expression needs besides path
// documents.
type findNeeds struct {
	attr  bool // the inode's attributes
	empty bool // whether directories have entries (-empty)
}

// findExpr is a parsed command line: the starting points and the
// expression, with find's global options.
type findExpr struct {
	paths    []string
	root     *fnode
	needs    findNeeds
	minDepth int
	maxDepth int // -1: no limit
	depth    bool
	warnings []string
}

// findEnv is what parsing depends on besides the arguments.
type findEnv struct {
	now     time.Time
	chars   bool // a UTF-8 locale
	lookupU func(name string) (uint32, bool)
	lookupG func(name string) (uint32, bool)
	lstat   func(path string) (os.FileInfo, error)
}

// findError is a mistake in find's arguments: GNU's message, status 1.
type findError struct{ msg string }

func (e findError) Error() string { return e.msg }

func findErrorf(format string, a ...any) error { return findError{fmt.Sprintf(format, a...)} }
