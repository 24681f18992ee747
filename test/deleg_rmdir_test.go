package test

// rmdir under a delegation: a mount that holds a delegation on a directory
// whose listing it knows complete and empty removes it without the refresh
// and the search that prove emptiness otherwise. These tests try to make
// it remove a directory that is not empty.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
)

// TestDelegatedRmdirSeesOtherMountsCreate: mount A knows directory d empty
// under its delegation; mount B creates d/x, which recalls A's delegation
// first; A's rmdir of d must then fail with ENOTEMPTY, and d/x stay.
func TestDelegatedRmdirSeesOtherMountsCreate(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	b := f.Mount(t)
	for i := 0; i < 5; i++ {
		d := fmt.Sprintf("d%d", i)
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		// Born delegated here and known empty: an rmdir now would need no
		// read at all.
		if ents, err := os.ReadDir(a.Path(d)); err != nil || len(ents) != 0 {
			t.Fatalf("listing new %s: %v %v", d, ents, err)
		}
		if err := os.WriteFile(b.Path(d, "x"), []byte("from b"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := os.Remove(a.Path(d))
		if !errors.Is(err, syscall.ENOTEMPTY) {
			t.Fatalf("rmdir of %s on A after B created %s/x: %v, want ENOTEMPTY", d, d, err)
		}
		if got, err := os.ReadFile(b.Path(d, "x")); err != nil || string(got) != "from b" {
			t.Fatalf("%s/x after the refused rmdir: %q %v", d, got, err)
		}
	}
	mounttest.FsckClean(t, f)
}

// TestDelegatedRmdirRacesOwnCreates: on one delegated mount, creates in a
// directory race its rmdir. The kernel orders them (both take the
// directory's inode lock), so this checks that the delegation's listing
// follows the mount's own creates at once: whatever wins, no entry may
// outlive its directory (the rmdir fails with ENOTEMPTY, or the creates
// after it fail), and fsck finds nothing orphaned. (A create the kernel
// gave up on, interrupted, may still run in the daemon: knownEmpty also
// waits for changes under way, which no test here can time.)
func TestDelegatedRmdirRacesOwnCreates(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	const rounds = 30
	removed, refused := 0, 0
	for r := 0; r < rounds; r++ {
		d := a.Path(fmt.Sprintf("r%d", r))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadDir(d); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		created := make([]bool, 4)
		for w := range created {
			wg.Add(1)
			go func() {
				defer wg.Done()
				created[w] = os.WriteFile(fmt.Sprintf("%s/f%d", d, w), nil, 0o644) == nil
			}()
		}
		rmErr := os.Remove(d)
		wg.Wait()
		switch {
		case rmErr == nil:
			removed++
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("round %d: rmdir succeeded but %s is there: %v", r, d, err)
			}
		case errors.Is(rmErr, syscall.ENOTEMPTY):
			refused++
			ents, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range created {
				if c {
					n++
				}
			}
			if len(ents) != n {
				t.Fatalf("round %d: %d creates succeeded, the directory lists %d", r, n, len(ents))
			}
		default:
			t.Fatalf("round %d: rmdir: %v", r, rmErr)
		}
	}
	t.Logf("%d rounds: rmdir won %d, creates won %d", rounds, removed, refused)
	mounttest.FsckClean(t, f)
}
