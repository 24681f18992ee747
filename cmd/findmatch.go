package cmd

// Shell patterns as GNU find matches them (-name, -path and their -i
// forms): glibc's fnmatch(3) without flags, or with FNM_CASEFOLD. In a
// UTF-8 locale it matches characters, and when that fails (or the
// pattern or the name is not UTF-8) bytes: "?" matches "é", and so does
// "??" (glibc 2.36); in any other locale it matches bytes.

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// utf8Locale reports whether the environment names a UTF-8 locale for
// characters, as setlocale(LC_ALL, "") would pick it: LC_ALL, else
// LC_CTYPE, else LANG.
func utf8Locale(getenv func(string) string) bool {
	loc := ""
	for _, v := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if loc = getenv(v); loc != "" {
			break
		}
	}
	l := strings.ToLower(loc)
	return strings.Contains(l, "utf-8") || strings.Contains(l, "utf8")
}

// fnmatch reports whether name matches pattern as glibc's fnmatch does
// (no flags, or FNM_CASEFOLD with fold); chars: the locale is UTF-8.
func fnmatch(pattern, name string, fold, chars bool) bool {
	if chars && utf8.ValidString(pattern) && utf8.ValidString(name) && globMatch([]rune(pattern), []rune(name), fold, true) {
		return true
	}
	return globMatch(byteRunes(pattern), byteRunes(name), fold, false)
}

// byteRunes is s a byte at a time.
func byteRunes(s string) []rune {
	rs := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		rs[i] = rune(s[i])
	}
	return rs
}

// foldRune is r in lower case: towlower for characters, tolower (ASCII
// only, as in the C locale and in a UTF-8 locale's single bytes) for bytes.
func foldRune(r rune, chars bool) rune {
	if chars {
		return unicode.ToLower(r)
	}
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// globMatch matches p against s, backtracking to the last * only (which
// is enough: a later * can absorb whatever an earlier one could).
func globMatch(p, s []rune, fold, chars bool) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) || pi < len(p) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				for pi < len(p) && p[pi] == '*' {
					pi++
				}
				starP, starS = pi, si
				continue
			case '?':
				if si < len(s) {
					pi++
					si++
					continue
				}
			case '[':
				if si < len(s) {
					ok, next, valid := matchBracket(p, pi, s[si], fold, chars)
					if !valid {
						return false // an unknown class: fnmatch fails
					}
					if next < 0 { // not a bracket expression: a literal [
						if equalRune(c, s[si], fold, chars) {
							pi++
							si++
							continue
						}
					} else if ok {
						pi = next
						si++
						continue
					}
				}
			case '\\':
				if pi+1 == len(p) {
					return false // a trailing backslash matches nothing
				}
				if si < len(s) && equalRune(p[pi+1], s[si], fold, chars) {
					pi += 2
					si++
					continue
				}
			default:
				if si < len(s) && equalRune(c, s[si], fold, chars) {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 || starS >= len(s) {
			return false
		}
		starS++
		pi, si = starP, starS
	}
	return true
}

func equalRune(a, b rune, fold, chars bool) bool {
	if a == b {
		return true
	}
	return fold && foldRune(a, chars) == foldRune(b, chars)
}

// matchBracket matches c against the bracket expression at p[i] ('['):
// ok if it matches, next the index after its ']' (-1 if the [ opens no
// bracket expression, and is a literal), valid false for a class name
// fnmatch does not know.
func matchBracket(p []rune, i int, c rune, fold, chars bool) (ok bool, next int, valid bool) {
	j := i + 1
	negate := false
	if j < len(p) && (p[j] == '!' || p[j] == '^') {
		negate = true
		j++
	}
	orig := c // classes test the character as it is, ranges and members folded
	if fold {
		c = foldRune(c, chars)
	}
	matched := false
	first := true
	for {
		if j >= len(p) {
			return false, -1, true
		}
		r := p[j]
		if r == ']' && !first {
			j++
			break
		}
		first = false
		var lo rune
		switch {
		case r == '\\':
			if j+1 >= len(p) {
				return false, -1, true
			}
			lo = p[j+1]
			j += 2
		case r == '[' && j+1 < len(p) && p[j+1] == ':':
			end := closing(p, j+2, ':')
			if end < 0 {
				lo = r
				j++
				break
			}
			class := string(p[j+2 : end])
			in, known := inClass(class, orig, chars)
			if !known {
				return false, 0, false
			}
			if in {
				matched = true
			}
			j = end + 2
			continue
		case r == '[' && j+1 < len(p) && (p[j+1] == '=' || p[j+1] == '.'):
			end := closing(p, j+2, p[j+1])
			if end < 0 || end != j+3 {
				lo = r
				j++
				break
			}
			lo = p[j+2] // a one-character equivalence class or collating symbol
			j = end + 2
		default:
			lo = r
			j++
		}
		hi := lo
		if j+1 < len(p) && p[j] == '-' && p[j+1] != ']' {
			hi = p[j+1]
			j += 2
			if hi == '\\' && j < len(p) {
				hi = p[j]
				j++
			}
		}
		if fold {
			lo, hi = foldRune(lo, chars), foldRune(hi, chars)
		}
		if lo <= c && c <= hi {
			matched = true
		}
	}
	return matched != negate, j, true
}

// closing is the index of the delim that ends a [:class:], [=c=] or
// [.c.] whose name starts at p[from], or -1.
func closing(p []rune, from int, delim rune) int {
	for k := from; k+1 < len(p); k++ {
		if p[k] == delim && p[k+1] == ']' {
			return k
		}
		if p[k] == ']' {
			return -1
		}
	}
	return -1
}

// inClass reports whether c is in the character class named (known false
// for a name fnmatch does not know). Bytes beyond ASCII are in no class,
// as in the C locale.
func inClass(name string, c rune, chars bool) (in, known bool) {
	if !chars && c >= 0x80 {
		_, known := classes[name]
		return false, known
	}
	f, known := classes[name]
	if !known {
		return false, false
	}
	return f(c), true
}

var classes = map[string]func(rune) bool{
	"alnum": func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) },
	"alpha": unicode.IsLetter,
	"blank": func(r rune) bool { return r == ' ' || r == '\t' },
	"cntrl": unicode.IsControl,
	"digit": func(r rune) bool { return '0' <= r && r <= '9' },
	"graph": func(r rune) bool { return unicode.IsGraphic(r) && !unicode.IsSpace(r) },
	"lower": unicode.IsLower,
	"print": func(r rune) bool { return unicode.IsPrint(r) },
	"punct": func(r rune) bool {
		return r < 0x80 && unicode.IsPunct(r) || r < 0x80 && unicode.IsSymbol(r) || r >= 0x80 && unicode.IsPunct(r)
	},
	"space":  unicode.IsSpace,
	"upper":  unicode.IsUpper,
	"xdigit": func(r rune) bool { return '0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F' },
}

// Names as GNU find takes them from a path (gnulib's base_name,
// last_component, base_len, and find's %h).

// lastComponent is the last component of name, with its trailing
// slashes; "" for a name of slashes only.
func lastComponent(name string) string {
	base := strings.TrimLeft(name, "/")
	start := len(name) - len(base)
	lastWasSlash := false
	for i := start; i < len(name); i++ {
		if name[i] == '/' {
			lastWasSlash = true
		} else if lastWasSlash {
			start = i
			lastWasSlash = false
		}
	}
	return name[start:]
}

// baseLen is the length of name without its trailing slashes, but at
// least one byte.
func baseLen(name string) int {
	n := len(name)
	for n > 1 && name[n-1] == '/' {
		n--
	}
	return n
}

// baseName is gnulib's base_name: the last component, with one trailing
// slash if it had any; "/" for a name of slashes.
func baseName(name string) string {
	base := lastComponent(name)
	if base == "" {
		return name[:baseLen(name)]
	}
	n := baseLen(base)
	if n < len(base) && base[n] == '/' {
		n++
	}
	return base[:n]
}

// nameOfPath is what -name matches of a path: its base name without
// trailing slashes ("/" stays).
func nameOfPath(path string) string {
	base := baseName(path)
	last := lastComponent(base)
	if last == "" {
		last = base
	}
	return base[:len(base)-len(last)+baseLen(last)]
}

// dirOfPath is find's %h: the path without its last component (and
// without trailing slashes before it, unless the path is only one
// component with them), "." if it has no slash.
func dirOfPath(path string) string {
	s := len(path) - 1
	for s >= 0 && path[s] == '/' {
		s--
	}
	p := path
	if 0 < s && s+1 < len(path) {
		p = path[:s+1]
	}
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "."
	}
	return p[:i]
}
