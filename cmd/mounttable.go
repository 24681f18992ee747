package cmd

// The mount table, as esfs find and esfs du read it to tell a path under
// a mount point of a filesystem from a path in the filesystem itself, and
// which filesystem the paths they are given are in.

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/esfs/esfs/store"
)

// mountLine is one line of the mount table.
type mountLine struct {
	dir, fstype, source string
}

// mountTable reads /proc/self/mountinfo: the mount point (field 5) and,
// after the "-" separator, the type and source of each mount.
func mountTable() ([]mountLine, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		m := mountLine{dir: unescapeMountinfo(fields[4])}
		for i, x := range fields {
			if x == "-" && i+2 < len(fields) {
				m.fstype, m.source = fields[i+1], unescapeMountinfo(fields[i+2])
				break
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// mountOf is the mount that holds path (absolute, clean) on this
// machine: the last mounted of those at its longest mount point prefix.
func mountOf(path string, mounts []mountLine) (mountLine, bool) {
	best, found := mountLine{}, false
	for _, m := range mounts {
		if store.IsWithin(path, m.dir) && (!found || len(m.dir) >= len(best.dir)) {
			best, found = m, true
		}
	}
	return best, found
}

// mountedPath is the path in filesystem index of abs, a path on this
// machine, if it is under a mount of that filesystem (ok); a path under
// a mount of another esfs filesystem is a mistake.
func mountedPath(abs, index string, mounts []mountLine) (path string, ok bool, err error) {
	m, found := mountOf(abs, mounts)
	if !found || m.fstype != esfsType {
		return "", false, nil
	}
	subdir, ok := subdirOfSource(m.source, index)
	if !ok {
		other := sourceIndex(m.source)
		return "", false, usagef("%s is in filesystem %s (mounted at %s), not %s: give --index %s", abs, other, m.dir, index, other)
	}
	rest := strings.TrimPrefix(abs, m.dir)
	if m.dir == "/" {
		rest = abs
	}
	return filepath.Join(subdir, rest), true, nil
}

// indexOfMounts sets --index, when neither it nor ESFS_INDEX is given, to
// the filesystem mounted where paths are, if they are under mounts of
// one: esfs find . and esfs du . in a mount need no --index.
func indexOfMounts(c *cli.Context, paths []string, mounts []mountLine) error {
	if c.IsSet("index") && c.String("index") != "" {
		return nil
	}
	if idx := mountedIndex(paths, mounts); idx != "" {
		return c.Set("index", idx)
	}
	return nil
}

// mountedIndex is the filesystem of the esfs mounts that paths are in,
// "" if they are in none or in mounts of several.
func mountedIndex(paths []string, mounts []mountLine) string {
	index := ""
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return ""
		}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			abs = filepath.Join(dir, filepath.Base(abs))
		}
		m, ok := mountOf(abs, mounts)
		if !ok || m.fstype != esfsType {
			continue
		}
		idx := sourceIndex(m.source)
		if index != "" && idx != index {
			return ""
		}
		index = idx
	}
	return index
}

// sourceIndex is the filesystem of an esfs mount's source
// (esfs:INDEX or esfs:INDEX:/SUBDIR).
func sourceIndex(source string) string {
	idx, _, _ := strings.Cut(strings.TrimPrefix(source, "esfs:"), ":")
	return idx
}
