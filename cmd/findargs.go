package cmd

// The arguments of find's tests as GNU find reads them: patterns, file
// types, numbers, sizes and time windows, each both a check of one file
// and a condition the index can answer; and GNU's messages for files it
// cannot stat.

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
