package test

// A directory made in memory under a write delegation is born with a write
// delegation of its own, whose lock document lands in the stage of the
// batch that makes the directory. Until then the mount answers the
// directory's names from memory, and its kernel keeps those answers (an
// hour under delegations): the document must land with the directory, or
// other mounts could change the directory without recalling the mount.

import (
	"fmt"
	"os"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

// TestBornDelegationRefusedIsNotKept: mount A makes a directory in memory
// and a file in it, which it keeps open (its kernel keeps the file's
// attributes, told under the directory's delegation); the stage of the
// batch that makes them lands, but the cluster refuses the item that
// writes the directory's delegation document. The directory must not
// become visible without it: another mount B that then changes the file's
// mode recalls A first, and A's fstat shows the new mode at once.
func TestBornDelegationRefusedIsNotKept(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	// Only the fsync below may flush A's batch: the flush interval must
	// not land it before the fault that refuses its item is in place.
	a, _ := delegMount(t, f, "--es-url", fp.URL, "--flush-interval", "1h")
	b, _ := delegMount(t, f)
	if err := os.Mkdir(a.Path("top"), 0o755); err != nil {
		t.Fatal(err)
	}
	// top is born write-delegated to A: new and f are made in memory, and
	// new gets a write delegation born in the batch.
	if err := os.Mkdir(a.Path("top", "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(a.Path("top", "new", "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o777 != 0o644 {
		t.Fatalf("fstat: mode %o, %v", st.Mode, err)
	}
	id := fmt.Sprintf("D%d", mounttest.Ino(t, a.Path("top", "new")))
	refused := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("-locks", `"_id":"`+id+`"`), Rewrite: mounttest.FailBulkItem(id)})
	// What fsync answers is the batch's (one rolled back reports an
	// error, and is tried again): only what follows is checked.
	err = unix.Fsync(fd)
	refused.WaitFired(t)
	t.Logf("fsync of the batch whose delegation document was refused: %v (the cluster answered %d)", err, refused.Status)

	if err := os.Chmod(b.Path("top", "new", "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o777 != 0o600 {
		t.Errorf("A's fstat: mode %o, %v right after B's chmod to 600", st.Mode&0o777, err)
	}
	if fi, err := os.Stat(a.Path("top", "new", "f")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("A's stat: %v, %v right after B's chmod to 600", fi.Mode(), err)
	}
	mounttest.FsckClean(t, f)
}
