package cmd

// The mount table, as esfs find and esfs du read it to tell a path under
// a mount point of a filesystem from a path in the filesystem itself.

import (
	"bufio"
	"os"
	"strings"

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
