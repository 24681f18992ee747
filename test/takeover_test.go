package test

// Takeover of a dead mount's rename by an admin command rather than by
// another mount. Admin sessions (import, fsck and the others) join the
// protocol as sessions of their own and finish a dead mount's operations
// when they meet them: a rename that replaced a file must then drop the
// replaced inode's link, as a mount finishing it would, or the inode and
// its data stay behind with no name.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// TestTakeoverByAdminDropsReplacedLink: mount A renames a file over
// another and is killed right after the commit point. No other mount runs;
// an admin command meets the rename and finishes it: `esfs import` into
// the rename's source name (whose lock the dead rename holds), or
// `esfs fsck --repair`. Afterwards fsck is clean, the destination names
// the source's inode and the replaced inode is gone.
func TestTakeoverByAdminDropsReplacedLink(t *testing.T) {
	for _, admin := range []struct {
		name string
		run  func(t *testing.T, f *mounttest.FS)
	}{
		{"import", func(t *testing.T, f *mounttest.FS) {
			local := t.TempDir()
			if err := os.WriteFile(filepath.Join(local, "imported"), []byte("imported\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// The dead rename holds /src exclusively: the import waits
			// until A is judged dead, then takes the rename over.
			out, err := f.Run("import", "--lease", "2s", "--quiet", local, "/src")
			if err != nil {
				t.Fatalf("esfs import into the dead rename's source (%v):\n%s", err, out)
			}
		}},
		{"fsck-repair", func(t *testing.T, f *mounttest.FS) {
			out, err := f.Run("fsck", "--repair", "--lease", "2s")
			t.Logf("esfs fsck --repair (%v):\n%s", err, out)
			if !strings.Contains(out, "unfinished operation") {
				t.Fatalf("fsck --repair did not meet the dead mount's rename")
			}
			if strings.Contains(out, "unreachable inode") {
				t.Errorf("finishing the rename left the replaced inode without a name (fsck --repair found it afterwards)")
			}
		}},
	} {
		t.Run(admin.name, func(t *testing.T) {
			f := mounttest.NewFS(t)
			// Journaled renames (--write-delegations=false): one made in
			// memory never meets the crash point.
			a := f.MountAt(t, t.TempDir(), []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--write-delegations=false",
				"--lease", "2s", "--attr-timeout=0", "--entry-timeout=0", "--negative-timeout=0", "--cache-ttl=0")
			// A dies holding the rename's locks, and the lease its
			// creates took on the root's change lock: a lease covers no
			// journaled work, so fsck lists it and is still clean.
			inos := map[string]uint64{}
			for _, name := range []string{"src", "dst"} {
				if err := os.WriteFile(a.Path(name), []byte(strings.Repeat(name, 1000)), 0o644); err != nil {
					t.Fatal(err)
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(a.Path(name), &st); err != nil {
					t.Fatal(err)
				}
				inos[name] = st.Ino
			}
			mv := mounttest.Background(func() mounttest.Result {
				return mounttest.Exec(2*time.Minute, "/", "mv", "-T", a.Path("src"), a.Path("dst"))
			})
			if _, ok := a.WaitExit(2 * time.Minute); !ok {
				t.Fatal("mount A did not die at rename-after-commit")
			}
			a.Kill()
			if !strings.Contains(a.Log(), "crash point rename-after-commit reached") {
				t.Fatalf("mount A exited without reaching its crash point:\n%s", a.Log())
			}
			mounttest.WaitResult(t, "mv on the dead mount", mv, time.Minute)

			admin.run(t, f)

			if out, err := f.Run("fsck", "--no-wait"); err != nil {
				t.Errorf("esfs fsck after the takeover (%v):\n%s", err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d, err := f.Store.GetDentry(ctx, "/dst")
			switch {
			case err != nil:
				t.Errorf("/dst: %v", err)
			case d.Ino != inos["src"] || d.Intent.Op != "":
				t.Errorf("/dst is inode %d (intent %+v), want the source's %d, no intent", d.Ino, d.Intent, inos["src"])
			}
			if _, err := f.Store.GetInode(ctx, inos["dst"]); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the replaced inode %d is still there after the takeover (%v): its link was never dropped", inos["dst"], err)
			}
		})
	}
}
