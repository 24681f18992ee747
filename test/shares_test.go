package test

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestSharedLeaseCreates: a burst of creates in one directory takes its
// shared locks once (a lease), not once per file; an exclusive request
// from another mount (renaming an ancestor) revokes the lease within a
// fraction of a second although the burst goes on; and every create that
// succeeded is found exactly once, under the new name.
func TestSharedLeaseCreates(t *testing.T) {
	f := mounttest.NewFS(t)
	addr := freeAddr(t)
	a := f.Mount(t, "--metrics-addr", addr, "--lease", "2s")
	b := f.Mount(t, "--lease", "2s")
	if err := os.MkdirAll(a.Path("d", "e", "f"), 0o755); err != nil {
		t.Fatal(err)
	}

	before := scrape(t, "http://"+addr+"/metrics")
	const n = 200
	for i := 0; i < n; i++ {
		if err := os.WriteFile(a.Path("d", "e", "f", fmt.Sprintf("x%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after := scrape(t, "http://"+addr+"/metrics")
	diff := func(name string, labels ...string) float64 {
		return sample(after, name, labels...) - max(sample(before, name, labels...), 0)
	}
	acquired := diff("esfs_lock_acquire_seconds")
	creates := diff("esfs_fuse_request_duration_seconds", "op", "CREATE")
	bulks := diff("esfs_es_request_duration_seconds", "endpoint", "_bulk")
	t.Logf("%v creates: %v lock acquisitions, %v bulk requests, %v mgets", creates, acquired, bulks, diff("esfs_es_request_duration_seconds", "endpoint", "_mget"))
	if creates != n {
		t.Errorf("%v CREATE requests for %d files", creates, n)
	}
	// Sequential creates keep the lease alive (each comes well within the
	// linger time): a handful of acquisitions, not one per file.
	if acquired > n/10 {
		t.Errorf("%v lock acquisitions for %d creates in one directory: the shared locks are not kept", acquired, n)
	}
	// One bulk per create (inode, path and directory times together), plus
	// the few lock bulks.
	if bulks > n+n/10 {
		t.Errorf("%v bulk requests for %d creates", bulks, n)
	}

	// Revocation: mount a creates without pause; mount b renames an
	// ancestor meanwhile.
	var made []string
	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("y%d", i)
			if err := os.WriteFile(a.Path("d", "e", "f", name), nil, 0o644); err == nil {
				mu.Lock()
				made = append(made, name)
				mu.Unlock()
			}
		}
	}()
	time.Sleep(time.Second)
	start := time.Now()
	err := os.Rename(b.Path("d", "e"), b.Path("d", "e2"))
	took := time.Since(start)
	time.Sleep(time.Second) // creates go on failing against the old path
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("rename during the burst: %v", err)
	}
	t.Logf("rename of an ancestor during a burst of creates on another mount took %s; %d creates succeeded", took.Round(time.Millisecond), len(made))
	if took > 3*time.Second {
		t.Errorf("the rename waited %s: the lease was not given back when it asked", took)
	}
	if len(made) == 0 {
		t.Fatal("no create succeeded during the burst")
	}
	// Exactly what succeeded, under the new name, nothing at the old one.
	entries, err := os.ReadDir(b.Path("d", "e2", "f"))
	if err != nil {
		t.Fatal(err)
	}
	var ys []string
	for _, e := range entries {
		if e.Name()[0] == 'y' {
			ys = append(ys, e.Name())
		}
	}
	sort.Strings(ys)
	sort.Strings(made)
	if fmt.Sprint(ys) != fmt.Sprint(made) {
		t.Errorf("after the rename, d/e2/f holds %d y-files, the burst made %d:\n got  %v\n want %v", len(ys), len(made), ys, made)
	}
	if _, err := os.Stat(b.Path("d", "e")); !os.IsNotExist(err) {
		t.Errorf("d/e after the rename: %v", err)
	}
	checkInvariants(t, f, nil)
}
