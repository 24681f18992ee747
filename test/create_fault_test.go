package test

import (
	"bytes"
	"os"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

// failInodeItem is a Rewrite that makes the bulk's item creating an inode
// fail on its own while the others land: what a node that dies holding
// that item's shard does to a create whose other items another node took.
func failInodeItem(body []byte) []byte {
	lines := bytes.Split(body, []byte("\n"))
	for i := 0; i+1 < len(lines); i++ {
		if bytes.Contains(lines[i], []byte(`"create"`)) && bytes.Contains(lines[i], []byte(`-inodes`+store.WriteAliasSuffix+`"`)) {
			lines[i+1] = append([]byte(`{"esfs_test_refused":1,`), lines[i+1][1:]...)
			break
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// TestCreateAnswerLost: a create on the synchronous path whose bulk (the
// inode, the name, the directory's times) lands, in whole or in part,
// but whose answer never comes back. The create is settled by making it
// again within the call: the process is told it succeeded, the file is
// whole on every mount (never a name whose inode is missing, never a file
// that appears after the caller was told EIO), and fsck is clean.
func TestCreateAnswerLost(t *testing.T) {
	cases := []struct {
		name  string
		fault func(match func(string, string, []byte) bool) *mounttest.Fault
	}{
		{"answer reset", func(m func(string, string, []byte) bool) *mounttest.Fault {
			return &mounttest.Fault{Match: m, Reset: true}
		}},
		{"inode item lost and answer reset", func(m func(string, string, []byte) bool) *mounttest.Fault {
			return &mounttest.Fault{Match: m, Rewrite: failInodeItem, Reset: true}
		}},
		{"held past the timeout", func(m func(string, string, []byte) bool) *mounttest.Fault {
			return &mounttest.Fault{Match: m, Delay: mounttest.LateDelay, Reset: true}
		}},
	}
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	// Without delegations a create is one bulk of its own, sent at once.
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String(), "--delegations=false")
	b := mounttest.MountUncached(t, f, nil)
	for i, c := range cases {
		name := []string{"reset", "half", "held"}[i]
		fault := fp.Add(c.fault(mounttest.BulkTo("", `"name":"`+name+`"`)))
		fd, err := unix.Open(a.Path(name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o640)
		fault.WaitFired(t)
		if err != nil {
			t.Errorf("%s: create: %v, want success (the create landed or was made again)", c.name, err)
			continue
		}
		if _, err := unix.Write(fd, []byte(name+"\n")); err != nil {
			t.Errorf("%s: write: %v", c.name, err)
		}
		if err := unix.Close(fd); err != nil {
			t.Errorf("%s: close: %v", c.name, err)
		}
		for _, m := range []*mounttest.Mount{a, b} {
			if got, err := os.ReadFile(m.Path(name)); err != nil || string(got) != name+"\n" {
				t.Errorf("%s: %s reads %q, %v", c.name, m.Path(name), got, err)
			}
			if fi, err := os.Stat(m.Path(name)); err != nil || fi.Mode().Perm() != 0o640 {
				t.Errorf("%s: stat %s: %v, %v", c.name, m.Path(name), fi, err)
			}
		}
	}
	mounttest.FsckClean(t, f)
}

// TestMkdirAnswerLostKeepsParentLinks: a mkdir's bulk carries the parent's
// link count (a compare-and-set) with the new directory's documents. When
// its outcome is unknown, the mkdir is made again within the call
// (TestCreateAnswerLost), and the count must be settled as well: added if
// the first try's never landed, not twice if it did (campaign seeds
// 30904437 and 956352814: a directory's link count one short after a
// refused bulk).
func TestMkdirAnswerLostKeepsParentLinks(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String(), "--delegations=false")
	b := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(a.Path("p"), 0o755); err != nil {
		t.Fatal(err)
	}
	faults := map[string]*mounttest.Fault{
		"refused": {Refuse: 503},
		"reset":   {Reset: true},
		"held":    {Delay: mounttest.LateDelay, Reset: true},
	}
	made := 0
	for _, name := range []string{"refused", "reset", "held"} {
		fault := faults[name]
		fault.Match = mounttest.BulkTo("", `"name":"`+name+`"`)
		fp.Add(fault)
		err := os.Mkdir(a.Path("p", name), 0o755)
		fault.WaitFired(t)
		if err != nil {
			t.Errorf("%s: mkdir: %v, want success (made again within the call)", name, err)
			continue
		}
		made++ // WaitFired: a held first try has landed (or been refused) by now
		for _, m := range []*mounttest.Mount{a, b} {
			var st unix.Stat_t
			if err := unix.Stat(m.Path("p"), &st); err != nil || st.Nlink != uint64(2+made) {
				t.Errorf("%s: %s has %d links (%v), want %d", name, m.Path("p"), st.Nlink, err, 2+made)
			}
		}
	}
	mounttest.FsckClean(t, f)
}
