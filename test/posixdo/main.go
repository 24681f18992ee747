// Command posixdo makes one system call on paths relative to its working
// directory and prints its outcome: "0", or the errno's number. The POSIX
// survey (test/posix_cases_test.go) runs it under other users' credentials
// on a local filesystem and on an esfs mount, and compares the answers.
//
//	posixdo OP ARGS...
//
// OP is chmod, chown, lchown, truncate, ftruncate, open, write, link,
// unlink, rmdir, mkdir, rename, symlink, utimens, setxattr or removexattr
// (see run for the arguments). A symlink target of the form REPEAT:c:n is
// the byte c n times.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	unix.Umask(0o022)
	err := run(os.Args[1:])
	if err == nil {
		fmt.Println(0)
		return
	}
	if e, ok := err.(unix.Errno); ok {
		fmt.Println(int(e))
		return
	}
	fmt.Fprintln(os.Stderr, "posixdo:", err)
	os.Exit(2)
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no operation")
	}
	op, a := args[0], args[1:]
	want := map[string]int{"chmod": 2, "chown": 3, "lchown": 3, "truncate": 2, "ftruncate": 3, "open": 3, "write": 2,
		"link": 2, "unlink": 1, "rmdir": 1, "mkdir": 2, "rename": 2, "symlink": 2, "utimens": 4, "setxattr": 3, "removexattr": 2}
	n, ok := want[op]
	if !ok {
		return fmt.Errorf("unknown operation %q", op)
	}
	if len(a) != n {
		return fmt.Errorf("%s takes %d arguments", op, n)
	}
	switch op {
	case "chmod":
		return unix.Chmod(a[0], octal(a[1]))
	case "chown":
		return unix.Chown(a[0], num(a[1]), num(a[2]))
	case "lchown":
		return unix.Lchown(a[0], num(a[1]), num(a[2]))
	case "truncate":
		return unix.Truncate(a[0], int64(num(a[1])))
	case "ftruncate": // PATH FLAGS SIZE
		fd, err := unix.Open(a[0], flags(a[1]), 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Ftruncate(fd, int64(num(a[2])))
	case "open": // PATH FLAGS MODE
		fd, err := unix.Open(a[0], flags(a[1]), octal(a[2]))
		if err != nil {
			return err
		}
		return unix.Close(fd)
	case "write": // PATH DATA: written at offset 0 through O_WRONLY
		fd, err := unix.Open(a[0], unix.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := unix.Write(fd, []byte(a[1])); err != nil {
			unix.Close(fd)
			return err
		}
		return unix.Close(fd)
	case "link":
		return unix.Link(a[0], a[1])
	case "unlink":
		return unix.Unlink(a[0])
	case "rmdir":
		return unix.Rmdir(a[0])
	case "mkdir":
		return unix.Mkdir(a[0], octal(a[1]))
	case "rename":
		return unix.Rename(a[0], a[1])
	case "symlink":
		return unix.Symlink(expand(a[0]), a[1])
	case "utimens": // PATH ATIME MTIME FLAGS: times are now, omit or SEC.NSEC; FLAGS nofollow or -
		ts := []unix.Timespec{timespec(a[1]), timespec(a[2])}
		fl := 0
		if a[3] == "nofollow" {
			fl = unix.AT_SYMLINK_NOFOLLOW
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, a[0], ts, fl)
	case "setxattr":
		return unix.Setxattr(a[0], a[1], []byte(a[2]), 0)
	case "removexattr":
		return unix.Removexattr(a[0], a[1])
	}
	return fmt.Errorf("unreachable")
}

func num(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "posixdo: not a number:", s)
		os.Exit(2)
	}
	return n
}

func octal(s string) uint32 {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		fmt.Fprintln(os.Stderr, "posixdo: not an octal mode:", s)
		os.Exit(2)
	}
	return uint32(n)
}

// flags parses open flags written as RDONLY|CREAT|EXCL.
func flags(s string) int {
	names := map[string]int{"RDONLY": unix.O_RDONLY, "WRONLY": unix.O_WRONLY, "RDWR": unix.O_RDWR,
		"CREAT": unix.O_CREAT, "EXCL": unix.O_EXCL, "TRUNC": unix.O_TRUNC, "APPEND": unix.O_APPEND,
		"NOFOLLOW": unix.O_NOFOLLOW, "DIRECTORY": unix.O_DIRECTORY, "NOATIME": unix.O_NOATIME}
	fl := 0
	for _, n := range strings.Split(s, "|") {
		v, ok := names[n]
		if !ok {
			fmt.Fprintln(os.Stderr, "posixdo: unknown open flag:", n)
			os.Exit(2)
		}
		fl |= v
	}
	return fl
}

func timespec(s string) unix.Timespec {
	switch s {
	case "now":
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case "omit":
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	sec, nsec, _ := strings.Cut(s, ".")
	return unix.Timespec{Sec: int64(num(sec)), Nsec: int64(num(nsec))}
}

func expand(s string) string {
	if rest, ok := strings.CutPrefix(s, "REPEAT:"); ok {
		c, n, _ := strings.Cut(rest, ":")
		return strings.Repeat(c, num(n))
	}
	return s
}
