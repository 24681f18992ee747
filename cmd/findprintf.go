package cmd

// find's -printf: the format compiled once, and written for each file
// as GNU find writes it (its directives, escapes, widths and flags).

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/esfs/esfs/store"
)

// printfSeg is one piece of a -printf format: literal text, or a
// directive with the flags, width and precision printf(3) would take.
type printfSeg struct {
	text string // literal text; for a directive, its printf spec without the verb ("%-10")
	verb byte   // 0 for literal text
	kind byte   // for %A, %C and %T: the time field
	stop bool   // \c: stop printing this file's format here
}

// printfNeeds says which directives need the inode's attributes.
const printfNoAttr = "%pPfhHdy"

// parsePrintf compiles format; warn is called with GNU's warnings
// (unknown escapes and directives, which print as themselves).
func parsePrintf(format string, warn func(string)) ([]printfSeg, error) {
	var segs []printfSeg
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			segs = append(segs, printfSeg{text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		switch c {
		case '\\':
			if i+1 >= len(format) {
				lit.WriteByte('\\')
				continue
			}
			i++
			switch e := format[i]; e {
			case 'a':
				lit.WriteByte('\a')
			case 'b':
				lit.WriteByte('\b')
			case 'f':
				lit.WriteByte('\f')
			case 'n':
				lit.WriteByte('\n')
			case 'r':
				lit.WriteByte('\r')
			case 't':
				lit.WriteByte('\t')
			case 'v':
				lit.WriteByte('\v')
			case '\\':
				lit.WriteByte('\\')
			case 'c':
				flush()
				segs = append(segs, printfSeg{stop: true})
			default:
				if '0' <= e && e <= '7' {
					v, n := 0, 0
					for n < 3 && i < len(format) && '0' <= format[i] && format[i] <= '7' {
						v = v*8 + int(format[i]-'0')
						i++
						n++
					}
					i--
					lit.WriteByte(byte(v))
					continue
				}
				warn(fmt.Sprintf("warning: unrecognized escape `\\%c'", e))
				lit.WriteByte('\\')
				lit.WriteByte(e)
			}
		case '%':
			j := i + 1
			for j < len(format) && strings.IndexByte("-+ #0", format[j]) >= 0 {
				j++
			}
			for j < len(format) && '0' <= format[j] && format[j] <= '9' {
				j++
			}
			if j < len(format) && format[j] == '.' {
				j++
				for j < len(format) && '0' <= format[j] && format[j] <= '9' {
					j++
				}
			}
			if j >= len(format) {
				return nil, fmt.Errorf("error: %% at end of format string")
			}
			spec, verb := format[i:j], format[j]
			switch {
			case verb == '%':
				lit.WriteByte('%')
			case strings.IndexByte("ACT", verb) >= 0:
				if j+1 >= len(format) {
					return nil, fmt.Errorf("error: missing time format after %%%c", verb)
				}
				flush()
				segs = append(segs, printfSeg{text: spec, verb: verb, kind: format[j+1]})
				j++
			case strings.IndexByte("abcdfghiklmnpsStuyGHMPUF", verb) >= 0:
				flush()
				segs = append(segs, printfSeg{text: spec, verb: verb})
			case verb == 'D' || verb == 'Y' || verb == 'Z':
				return nil, fmt.Errorf("-printf %%%c is not supported by esfs find", verb)
			default:
				warn(fmt.Sprintf("warning: unrecognized format directive `%%%c'", verb))
				lit.WriteString(spec)
				lit.WriteByte(verb)
			}
			i = j
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return segs, nil
}

// printfNeedsAttr reports whether segs print anything of the inode.
func printfNeedsAttr(segs []printfSeg) bool {
	for _, s := range segs {
		if s.verb != 0 && strings.IndexByte(printfNoAttr, s.verb) < 0 {
			return true
		}
	}
	return false
}

// writePrintf writes segs for e.
func (fr *findRun) writePrintf(segs []printfSeg, e *fentry) {
	w := fr.out
	for _, s := range segs {
		if s.stop {
			return
		}
		if s.verb == 0 {
			w.WriteString(s.text)
			continue
		}
		a := &e.attr
		switch s.verb {
		case 'd':
			fmt.Fprintf(w, s.text+"d", e.depth)
		case 'm':
			fmt.Fprintf(w, s.text+"o", a.Mode&0o7777)
		case 'S':
			writeSparseness(w, s.text, a, fr.chunkSize)
		default:
			writeField(w, s.text, fr.printfString(s, e))
		}
	}
}

// writeField writes v as printf's %s with spec's flags, width and
// precision (which counts bytes).
func writeField(w interface{ WriteString(string) (int, error) }, spec, v string) {
	if spec == "%" {
		w.WriteString(v)
		return
	}
	left := false
	i := 1
	for i < len(spec) && strings.IndexByte("-+ #0", spec[i]) >= 0 {
		if spec[i] == '-' {
			left = true
		}
		i++
	}
	wd, prec := 0, -1
	j := i
	for j < len(spec) && spec[j] != '.' {
		j++
	}
	wd, _ = strconv.Atoi(spec[i:j])
	if j < len(spec) {
		prec, _ = strconv.Atoi(spec[j+1:])
	}
	if prec >= 0 && len(v) > prec {
		v = v[:prec]
	}
	pad := strings.Repeat(" ", max(0, wd-len(v)))
	if left {
		w.WriteString(v + pad)
	} else {
		w.WriteString(pad + v)
	}
}

// writeSparseness is %S: st_blocks*512/st_size, as printf's %g.
func writeSparseness(w interface{ WriteString(string) (int, error) }, spec string, a *store.Inode, chunkSize int64) {
	blocks := statBlocks(*a, chunkSize)
	var v float64
	switch {
	case a.Size == 0 && blocks == 0:
		v = 1
	case a.Size == 0:
		v = math.Inf(1)
	default:
		v = 512 * float64(blocks) / float64(a.Size)
	}
	if math.IsInf(v, 1) {
		writeField(w, strings.Map(func(r rune) rune {
			if r == '0' || r == '#' {
				return -1
			}
			return r
		}, spec), "inf")
		return
	}
	if !strings.Contains(spec, ".") {
		spec += ".6"
	}
	w.WriteString(fmt.Sprintf(spec+"g", v))
}

// printfString is the text of a directive printed as a string.
func (fr *findRun) printfString(s printfSeg, e *fentry) string {
	a := &e.attr
	switch s.verb {
	case 'p':
		return e.path
	case 'P':
		rel := e.path[len(e.start.given):]
		return strings.TrimPrefix(rel, "/")
	case 'f':
		if e.depth > 0 {
			return e.d.Name
		}
		return baseName(e.path)
	case 'h':
		return dirOfPath(e.path)
	case 'H':
		return e.start.given
	case 'y':
		return typeLetter(e.d.Type)
	case 's':
		return strconv.FormatInt(a.Size, 10)
	case 'b':
		return strconv.FormatUint(statBlocks(*a, fr.chunkSize), 10)
	case 'k':
		return strconv.FormatUint((statBlocks(*a, fr.chunkSize)+1)/2, 10)
	case 'n':
		return strconv.FormatUint(uint64(statNlink(*a)), 10)
	case 'i':
		return strconv.FormatUint(a.Ino, 10)
	case 'l':
		if a.Type == store.TypeSymlink {
			return a.Target
		}
		return ""
	case 'M':
		return modeString(a.Type, a.Mode)
	case 'u':
		return fr.ids.userName(a.Uid)
	case 'g':
		return fr.ids.groupName(a.Gid)
	case 'U':
		return strconv.FormatUint(uint64(a.Uid), 10)
	case 'G':
		return strconv.FormatUint(uint64(a.Gid), 10)
	case 'F':
		return esfsType
	case 'a':
		return ctimeFormat(a.Atime)
	case 'c':
		return ctimeFormat(a.Ctime)
	case 't':
		return ctimeFormat(a.Mtime)
	case 'A':
		return timeField(a.Atime, s.kind)
	case 'C':
		return timeField(a.Ctime, s.kind)
	case 'T':
		return timeField(a.Mtime, s.kind)
	}
	return ""
}

// typeLetter is %y's letter of a file type.
func typeLetter(t store.FileType) string {
	switch t {
	case store.TypeFile:
		return "f"
	case store.TypeDir:
		return "d"
	case store.TypeSymlink:
		return "l"
	case store.TypeFifo:
		return "p"
	case store.TypeSocket:
		return "s"
	case store.TypeCharDev:
		return "c"
	case store.TypeBlockDev:
		return "b"
	}
	return "U"
}

// modeString is ls -l's mode: the type, then rwx three times, with s, S,
// t and T for the setuid, setgid and sticky bits.
func modeString(t store.FileType, mode uint32) string {
	b := []byte("?---------")
	switch t {
	case store.TypeFile:
		b[0] = '-'
	case store.TypeDir:
		b[0] = 'd'
	case store.TypeSymlink:
		b[0] = 'l'
	case store.TypeFifo:
		b[0] = 'p'
	case store.TypeSocket:
		b[0] = 's'
	case store.TypeCharDev:
		b[0] = 'c'
	case store.TypeBlockDev:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) != 0 {
			b[1+i] = rwx[i]
		}
	}
	special := func(at int, bit uint32, set, unset byte) {
		if mode&bit == 0 {
			return
		}
		if b[at] == 'x' {
			b[at] = set
		} else {
			b[at] = unset
		}
	}
	special(3, 0o4000, 's', 'S')
	special(6, 0o2000, 's', 'S')
	special(9, 0o1000, 't', 'T')
	return string(b)
}

// timeOf is ns as the kernel reports it: seconds, and nanoseconds
// counted forward from them (a time before 1970 too).
func timeOf(ns int64) (sec, nsec int64) {
	sec, nsec = ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec
}

var (
	weekdays = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	months   = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// ctimeFormat is %a, %c and %t: ctime(3)'s format, with nanoseconds and
// GNU find's trailing zero after them.
func ctimeFormat(ns int64) string {
	sec, nsec := timeOf(ns)
	t := time.Unix(sec, 0)
	return fmt.Sprintf("%3s %3s %2d %02d:%02d:%02d.%09d0 %04d", weekdays[t.Weekday()], months[t.Month()-1],
		t.Day(), t.Hour(), t.Minute(), t.Second(), nsec, t.Year())
}

// timeField is %Ak, %Ck and %Tk: strftime's %k in the C locale, with
// nanoseconds after the seconds of @, S, T, X and +.
func timeField(ns int64, k byte) string {
	sec, nsec := timeOf(ns)
	frac := fmt.Sprintf(".%09d0", nsec)
	if k == '@' {
		if sec < 0 {
			return "-" + strconv.FormatUint(uint64(-sec), 10) + frac
		}
		return strconv.FormatInt(sec, 10) + frac
	}
	t := time.Unix(sec, 0)
	switch k {
	case 'S', 'T', 'X':
		return strftime(t, k) + frac
	case '+':
		return strftime(t, 'F') + "+" + strftime(t, 'T') + frac
	}
	return strftime(t, k)
}

// strftime is strftime(3)'s conversion %k of t in the C locale; an
// unknown one prints as itself, as glibc's does.
func strftime(t time.Time, k byte) string {
	hour12 := t.Hour() % 12
	if hour12 == 0 {
		hour12 = 12
	}
	yday := t.YearDay() - 1
	wday := int(t.Weekday())
	switch k {
	case 'a':
		return weekdays[wday]
	case 'A':
		return t.Weekday().String()
	case 'b', 'h':
		return months[t.Month()-1]
	case 'B':
		return t.Month().String()
	case 'c':
		return fmt.Sprintf("%s %s %2d %02d:%02d:%02d %d", weekdays[wday], months[t.Month()-1], t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
	case 'C':
		return fmt.Sprintf("%02d", floorDiv(t.Year(), 100))
	case 'd':
		return fmt.Sprintf("%02d", t.Day())
	case 'D', 'x':
		return fmt.Sprintf("%02d/%02d/%02d", int(t.Month()), t.Day(), mod(t.Year(), 100))
	case 'e':
		return fmt.Sprintf("%2d", t.Day())
	case 'F':
		return fmt.Sprintf("%04d-%02d-%02d", t.Year(), int(t.Month()), t.Day())
	case 'g':
		y, _ := t.ISOWeek()
		return fmt.Sprintf("%02d", mod(y, 100))
	case 'G':
		y, _ := t.ISOWeek()
		return strconv.Itoa(y)
	case 'H':
		return fmt.Sprintf("%02d", t.Hour())
	case 'I':
		return fmt.Sprintf("%02d", hour12)
	case 'j':
		return fmt.Sprintf("%03d", yday+1)
	case 'k':
		return fmt.Sprintf("%2d", t.Hour())
	case 'l':
		return fmt.Sprintf("%2d", hour12)
	case 'm':
		return fmt.Sprintf("%02d", int(t.Month()))
	case 'M':
		return fmt.Sprintf("%02d", t.Minute())
	case 'n':
		return "\n"
	case 'p':
		if t.Hour() < 12 {
			return "AM"
		}
		return "PM"
	case 'r':
		return strftime(t, 'I') + ":" + strftime(t, 'M') + ":" + strftime(t, 'S') + " " + strftime(t, 'p')
	case 'R':
		return strftime(t, 'H') + ":" + strftime(t, 'M')
	case 's':
		return strconv.FormatInt(t.Unix(), 10)
	case 'S':
		return fmt.Sprintf("%02d", t.Second())
	case 't':
		return "\t"
	case 'T', 'X':
		return strftime(t, 'H') + ":" + strftime(t, 'M') + ":" + strftime(t, 'S')
	case 'u':
		return strconv.Itoa((wday+6)%7 + 1)
	case 'U':
		return fmt.Sprintf("%02d", (yday+7-wday)/7)
	case 'V':
		_, w := t.ISOWeek()
		return fmt.Sprintf("%02d", w)
	case 'w':
		return strconv.Itoa(wday)
	case 'W':
		return fmt.Sprintf("%02d", (yday+7-(wday+6)%7)/7)
	case 'y':
		return fmt.Sprintf("%02d", mod(t.Year(), 100))
	case 'Y':
		return strconv.Itoa(t.Year())
	case 'z':
		return t.Format("-0700")
	case 'Z':
		return t.Format("MST")
	case '%':
		return "%"
	}
	return "%" + string(k)
}

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mod(a, b int) int { return a - floorDiv(a, b)*b }
