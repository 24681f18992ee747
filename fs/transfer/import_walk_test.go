package transfer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWalkLocalRefusesSwaps: an entry swapped for a symlink between its
// check and its open (a file for a symlink to a file, a directory for a
// symlink to a directory, a symlink for a file) fails the walk, naming
// it, and nothing outside the tree reaches the walk's function.
func TestWalkLocalRefusesSwaps(t *testing.T) {
	for _, c := range []struct {
		name, swapped string
		// swap replaces p, in tree, with a symlink to secret (a file and
		// a directory beside the tree) or a file.
		swap func(t *testing.T, p, secretFile, secretDir string)
		want string
	}{
		{"file", "f", func(t *testing.T, p, secretFile, _ string) {
			replaceWith(t, p, func(q string) error { return os.Symlink(secretFile, q) })
		},
			"replaced during the import (a regular file when listed, a symlink when opened); not followed"},
		{"directory", "d", func(t *testing.T, p, _, secretDir string) {
			replaceWith(t, p, func(q string) error { return os.Symlink(secretDir, q) })
		},
			"replaced during the import (a directory when listed, a symlink when opened); not followed"},
		{"symlink", "l", func(t *testing.T, p, _, _ string) {
			replaceWith(t, p, func(q string) error { return os.WriteFile(q, []byte("x"), 0o644) })
		},
			"replaced during the import (a symlink when listed, a regular file when opened); not followed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			tree, secretDir := filepath.Join(base, "tree"), filepath.Join(base, "secret")
			secretFile := filepath.Join(secretDir, "key")
			for _, d := range []string{tree, filepath.Join(tree, "d"), secretDir} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, s := range map[string]string{filepath.Join(tree, "f"): "public", filepath.Join(tree, "d", "g"): "public", secretFile: "SECRET"} {
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink("f", filepath.Join(tree, "l")); err != nil {
				t.Fatal(err)
			}
			root, err := os.Open(tree)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			testHookChecked = func(local string) {
				if local == filepath.Join(tree, c.swapped) {
					c.swap(t, local, secretFile, secretDir)
				}
			}
			defer func() { testHookChecked = nil }()
			var seen []string
			err = walkLocal(root, tree, func(e *localEntry) error {
				seen = append(seen, e.rel)
				if e.file != nil && e.st.Mode&0o170000 == 0o100000 {
					b := make([]byte, 16)
					n, _ := e.file.ReadAt(b, 0)
					if strings.Contains(string(b[:n]), "SECRET") {
						t.Errorf("%s: read the secret", e.local)
					}
				}
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), filepath.Join(tree, c.swapped)+": "+c.want) {
				t.Errorf("walk: %v, want %q", err, c.want)
			}
			for _, rel := range seen {
				if strings.HasPrefix(rel, "d/key") || rel == "key" {
					t.Errorf("the walk met %s, outside the tree", rel)
				}
			}
		})
	}
}

// replaceWith puts what make makes at p in p's place, atomically.
func replaceWith(t *testing.T, p string, make func(q string) error) {
	t.Helper()
	q := p + ".new"
	if err := make(q); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q, p); err != nil {
		// A directory is not replaced by rename: move it away first.
		if err := os.Rename(p, p+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(q, p); err != nil {
			t.Fatal(err)
		}
	}
}
