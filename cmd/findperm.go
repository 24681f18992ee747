package cmd

// find's -perm: MODE (exactly), -MODE (all of these bits), /MODE (any of
// them), MODE octal or symbolic as chmod takes it (gnulib's mode_compile
// and mode_adjust, applied to 0 without a umask, as GNU find does).

import (
	"fmt"

	"github.com/esfs/esfs/store"
)

// permTest is a parsed -perm: the bits for a file and for a directory
// (they differ with X), and how they are compared.
type permTest struct {
	kind    byte      // '=' exactly, '-' all of, '/' any of
	val     [2]uint32 // [0] for anything but a directory, [1] for one
	warning string
}

func (t permTest) holds(typ store.FileType, mode uint32) bool {
	v := t.val[0]
	if typ == store.TypeDir {
		v = t.val[1]
	}
	switch t.kind {
	case '-':
		return mode&v == v
	case '/':
		return v == 0 || mode&v != 0
	}
	return mode&0o7777 == v
}

// pushdown: exact modes as terms; all of some bits implies a mode at
// least as large; any of them, nothing cheap.
func (t permTest) pushdown() (when, unless sides) {
	byType := func(f func(v uint32) store.Cond) store.Cond {
		if t.val[0] == t.val[1] {
			return f(t.val[0])
		}
		dir := store.TypeIs(store.TypeDir)
		return store.AnyOf(store.AllOf(dir, f(t.val[1])), store.AllOf(store.NotCond(dir), f(t.val[0])))
	}
	switch t.kind {
	case '=':
		c := byType(func(v uint32) store.Cond { return store.InodeRange(store.FieldMode, int64(v), int64(v)) })
		return onInode(c), onInode(store.NotCond(c))
	case '-':
		c := byType(func(v uint32) store.Cond { return store.InodeRange(store.FieldMode, int64(v), 0o7777) })
		return onInode(c), always
	}
	return always, always
}

// parsePerm reads -perm's argument.
func parsePerm(arg string) (permTest, error) {
	t := permTest{kind: '='}
	s := arg
	if s != "" && (s[0] == '-' || s[0] == '/') {
		t.kind, s = s[0], s[1:]
	}
	changes, ok := modeCompile(s)
	if !ok {
		return t, findErrorf("invalid mode ‘%s’", arg)
	}
	t.val[0] = modeAdjust(false, changes)
	t.val[1] = modeAdjust(true, changes)
	if t.kind == '/' && t.val[0] == 0 && t.val[1] == 0 {
		t.warning = fmt.Sprintf("warning: you have specified a mode pattern %s (which is equivalent to /000). The meaning of -perm /000 has now been changed to be consistent with -perm -000; that is, while it used to match no files, it now matches all files.", arg)
	}
	return t, nil
}

// modeChange is one operation of a mode (gnulib's struct mode_change).
type modeChange struct {
	op        byte // '=', '+', '-'
	flag      byte // 'o' ordinary, 'X' execute if any, 'c' copy existing
	affected  uint32
	value     uint32
	mentioned uint32
}

const (
	sISUID   = 0o4000
	sISGID   = 0o2000
	sISVTX   = 0o1000
	sIRWXU   = 0o700
	sIRWXG   = 0o070
	sIRWXO   = 0o007
	modeBits = 0o7777
)

// modeCompile is gnulib's mode_compile.
func modeCompile(s string) ([]modeChange, bool) {
	if s != "" && '0' <= s[0] && s[0] < '8' {
		var octal uint32
		n := 0
		for ; n < len(s) && '0' <= s[n] && s[n] < '8'; n++ {
			octal = 8*octal + uint32(s[n]-'0')
			if octal > modeBits {
				return nil, false
			}
		}
		if n < len(s) {
			return nil, false
		}
		mentioned := uint32(modeBits)
		if n < 5 {
			mentioned = octal&(sISUID|sISGID) | sISVTX | 0o777
		}
		return []modeChange{{op: '=', flag: 'o', affected: modeBits, value: octal, mentioned: mentioned}}, true
	}
	var out []modeChange
	i := 0
	for {
		var affected uint32
	who:
		for ; ; i++ {
			if i >= len(s) {
				return nil, false
			}
			switch s[i] {
			case 'u':
				affected |= sISUID | sIRWXU
			case 'g':
				affected |= sISGID | sIRWXG
			case 'o':
				affected |= sISVTX | sIRWXO
			case 'a':
				affected |= modeBits
			case '=', '+', '-':
				break who
			default:
				return nil, false
			}
		}
		for i < len(s) && (s[i] == '=' || s[i] == '+' || s[i] == '-') {
			op := s[i]
			i++
			c := modeChange{op: op, flag: 'c', affected: affected}
			var next byte
			if i < len(s) {
				next = s[i]
			}
			switch next {
			case 'u':
				c.value = sIRWXU
				i++
			case 'g':
				c.value = sIRWXG
				i++
			case 'o':
				c.value = sIRWXO
				i++
			default:
				c.flag = 'o'
			perms:
				for ; i < len(s); i++ {
					switch s[i] {
					case 'r':
						c.value |= 0o444
					case 'w':
						c.value |= 0o222
					case 'x':
						c.value |= 0o111
					case 'X':
						c.flag = 'X'
					case 's':
						c.value |= sISUID | sISGID
					case 't':
						c.value |= sISVTX
					default:
						break perms
					}
				}
			}
			c.mentioned = c.value
			if affected != 0 {
				c.mentioned = affected & c.value
			}
			out = append(out, c)
		}
		if i < len(s) && s[i] == ',' {
			i++
			continue
		}
		break
	}
	if i != len(s) {
		return nil, false
	}
	return out, true
}

// modeAdjust is gnulib's mode_adjust of mode 0, umask 0.
func modeAdjust(dir bool, changes []modeChange) uint32 {
	var mode uint32
	for _, c := range changes {
		var omit uint32
		if dir {
			omit = (sISUID | sISGID) &^ c.mentioned
		}
		value := c.value
		switch c.flag {
		case 'c':
			value &= mode
			if value&0o444 != 0 {
				value |= 0o444
			}
			if value&0o222 != 0 {
				value |= 0o222
			}
			if value&0o111 != 0 {
				value |= 0o111
			}
		case 'X':
			if mode&0o111 != 0 || dir {
				value |= 0o111
			}
		}
		if c.affected != 0 {
			value &= c.affected
		}
		value &^= omit
		switch c.op {
		case '=':
			preserved := omit
			if c.affected != 0 {
				preserved |= ^c.affected
			}
			mode = mode&preserved | value
		case '+':
			mode |= value
		case '-':
			mode &^= value
		}
	}
	return mode & modeBits
}
