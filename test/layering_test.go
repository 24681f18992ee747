package test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
)

// TestLayering keeps the dependency direction (main -> cmd -> fs -> fs/vfs
// -> cache, locking, store) true without anyone remembering it: only fs
// (the FUSE adapter) imports go-fuse, only store imports go-elasticsearch,
// and the lower layers never import the upper ones. The mount's core
// (fs/vfs) knows no FUSE and no adapter. A package below one of the
// layers (fs/floor) follows that layer's rules; fs/transfer and fs/fsck
// (import, export and fsck, which run without a mount) may not import
// go-fuse either.
func TestLayering(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = mounttest.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/esfs/esfs"
	forbidden := map[string][]string{
		mod + "/store":   {"github.com/hanwen/go-fuse", mod + "/fs", mod + "/cache", mod + "/locking", mod + "/cmd"},
		mod + "/cache":   {"github.com/hanwen/go-fuse", "github.com/elastic/", mod + "/fs", mod + "/locking", mod + "/cmd"},
		mod + "/locking": {"github.com/hanwen/go-fuse", "github.com/elastic/", mod + "/fs", mod + "/cache", mod + "/cmd"},
		mod + "/fs":      {"github.com/elastic/", mod + "/cmd"},
		// The mount's core: no FUSE, and nothing of the adapter above it.
		mod + "/fs/vfs": {"github.com/hanwen/go-fuse", "github.com/elastic/", mod + "/fs", mod + "/cmd"},
		// The tools that work without a mount call fs's logic, never FUSE.
		mod + "/fs/transfer": {"github.com/hanwen/go-fuse", "github.com/elastic/", mod + "/cmd"},
		mod + "/fs/fsck":     {"github.com/hanwen/go-fuse", "github.com/elastic/", mod + "/cmd"},
		mod + "/cmd":         {"github.com/hanwen/go-fuse", "github.com/elastic/"},
		mod:                  {"github.com/hanwen/go-fuse", "github.com/elastic/"},
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		bad, ok := rulesOf(forbidden, mod, p.ImportPath)
		if !ok {
			continue
		}
		seen++
		for _, imp := range p.Imports {
			for _, b := range bad {
				if strings.HasPrefix(imp, b) {
					t.Errorf("%s imports %s", p.ImportPath, imp)
				}
			}
		}
	}
	if seen < 5 {
		t.Fatalf("checked only %d packages; the package list changed", seen)
	}
}

// rulesOf returns the forbidden imports of package pkg: those of its layer,
// the longest key that is pkg or a directory above it. The module root's
// own rules are for the root package alone (test and its helpers import
// what they test).
func rulesOf(forbidden map[string][]string, mod, pkg string) ([]string, bool) {
	best := ""
	for layer := range forbidden {
		within := pkg == layer || (layer != mod && strings.HasPrefix(pkg, layer+"/"))
		if within && len(layer) > len(best) {
			best = layer
		}
	}
	if best == "" {
		return nil, false
	}
	return forbidden[best], true
}
