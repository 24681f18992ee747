package cmd

// The mount point: checked before mounting, and whether something is
// mounted there (from /proc/self/mountinfo).

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// checkMountpoint catches the usual mistakes before anything is started.
// The mount table is read first: a mount point that is already mounted
// may be a hung FUSE mount, which a stat would wait for.
func checkMountpoint(mp string, nonempty bool) error {
	if m, ok, err := mountEntry(mp); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%s is already a mount point (%s; unmount it first: esfs umount %s)", mp, m, mp)
	}
	st, err := os.Stat(mp)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("mount point %s does not exist", mp)
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", mp, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mp)
	}
	if nonempty {
		return nil
	}
	d, err := os.Open(mp)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", mp, err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("mount point %s is not empty: mounting there would hide its files (--nonempty, or -o nonempty, to mount anyway)", mp)
	}
	return nil
}

// mounted is one line of the mount table: the filesystem's type and
// source, the mount's own options (ro, nosuid, relatime...) and its
// superblock's (for FUSE: rw or ro, user_id, allow_other...), and its
// device's minor number (for FUSE, the connection's number in fusectl).
type mounted struct {
	fstype, source, mountOpts, superOpts string
	minor                                int
}

func (m mounted) String() string { return m.fstype + " from " + m.source }

// mountEntry reads the mount at mp from /proc/self/mountinfo (the top one
// if several are stacked there): fields 5 (mount point) and 6 (its
// options) and, after the "-" separator, the type, source and superblock
// options, with spaces and other bytes escaped as octal.
func mountEntry(mp string) (mounted, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mounted{}, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var m mounted
	found := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mp {
			continue
		}
		found, m = true, mounted{minor: -1}
		if _, minor, ok := strings.Cut(fields[2], ":"); ok {
			if n, err := strconv.Atoi(minor); err == nil {
				m.minor = n
			}
		}
		for i, x := range fields {
			if x == "-" && i+3 < len(fields) {
				m.fstype, m.source = fields[i+1], unescapeMountinfo(fields[i+2])
				m.mountOpts, m.superOpts = fields[5], fields[i+3]
				break
			}
		}
	}
	return m, found, sc.Err()
}

func isMounted(mp string) (bool, error) {
	_, ok, err := mountEntry(mp)
	return ok, err
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, ch := range s[i+1 : i+4] {
				if ch < '0' || ch > '7' {
					ok = false
					break
				}
				v = v*8 + byte(ch-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
