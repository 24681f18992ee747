package test

// esfs search: words of names and text contents, the query language, and
// results that follow renames, edits, removals and hard links.

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestSearch: esfs search finds files by the words of their names and
// text contents, with the documented query language and filters, prints
// one path per line for pipes, and follows renames, edits, removals and
// hard links at once.
func TestSearch(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `
mkdir -p docs/deep notes bin
printf 'the quick brown fox\njumps over the lazy dog\n' > docs/fox.txt
printf 'Elasticsearch stores documents\n' > docs/deep/es.md
printf 'nothing to see\n' > notes/plain.txt
printf 'fox\000binary\n' > bin/blob
: > notes/fox-name-only
head -c 2500000 /dev/zero | tr '\000' a > docs/big.txt
printf ' needle \n' >> docs/big.txt
`)
	search := func(args ...string) ([]string, int) {
		t.Helper()
		r := mounttest.Run(t, mounttest.Cmd{Args: append([]string{"search", "--es-url", f.URL, "--index", f.Index}, args...), Env: []string{"ELASTICSEARCH_URL="}, Limit: time.Minute})
		out, code := r.Out, r.Code
		if code > 1 {
			t.Fatalf("esfs search %q: status %d:\n%s", args, code, out)
		}
		var lines []string
		if s := strings.TrimSpace(out); s != "" {
			lines = strings.Split(s, "\n")
		}
		return lines, code
	}
	expect := func(want []string, args ...string) {
		t.Helper()
		got, code := search(args...)
		if len(want) == 0 {
			if code != 1 || len(got) != 0 {
				t.Errorf("search %q: %q (status %d), want nothing and status 1", args, got, code)
			}
			return
		}
		if code != 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("search %q:\n got  %q (status %d)\n want %q", args, got, code, want)
		}
	}

	// Words of names and of contents; binary contents are not searched.
	expect([]string{"/docs/fox.txt", "/notes/fox-name-only"}, "fox")
	expect([]string{"/docs/fox.txt"}, "fox", "--under", "/docs")
	expect([]string{"/docs/fox.txt"}, "quick dog")
	expect([]string{"/docs/deep/es.md", "/docs/fox.txt"}, "quick | elasticsearch")
	expect([]string{"/notes/fox-name-only"}, "fox -lazy")
	expect([]string{"/docs/fox.txt"}, `"lazy dog"`)
	expect(nil, `"dog lazy"`)
	expect([]string{"/docs/deep/es.md"}, "elastic*")
	expect([]string{"/docs/deep/es.md"}, "elastisearch~1")
	expect([]string{"/docs/big.txt"}, "needle") // in the third 1 MiB chunk
	expect(nil, "binary")
	expect(nil, "nowhere")
	// Names alone, as find -name.
	expect([]string{"/docs/big.txt", "/docs/fox.txt", "/notes/plain.txt"}, "--name", "*.txt")
	expect([]string{"/docs/deep/es.md"}, "--iname", "*.MD")
	expect([]string{"/docs/deep/es.md", "/docs/fox.txt", "/notes/fox-name-only"}, "--name", "[ef]*")
	// Directories are found by name too.
	expect([]string{"/bin", "/bin/blob", "/docs/big.txt", "/docs/deep/es.md", "/docs/fox.txt", "/notes", "/notes/fox-name-only", "/notes/plain.txt"}, "--name", "[!d]*")
	expect([]string{"/notes/plain.txt"}, "see", "--name", "*.txt", "--under", "/notes")

	// Output usable on files: paths under the mount point, in a pipe.
	expect([]string{m.Path("docs", "fox.txt")}, "fox", "--mount", m.Dir, "--under", m.Path("docs"))
	out := mounttest.Sh(t, m.Dir, f.Bin+` search --es-url `+f.URL+` --index `+f.Index+` --mount "$PWD" needle | xargs wc -c`)
	if !strings.Contains(out, "2500009") {
		t.Errorf("search | xargs wc -c: %q, want the size of big.txt (2500009)", out)
	}

	// Renames, edits, removals and hard links show at once.
	mounttest.Sh(t, m.Dir, `mv docs archive && echo 'no more animals' > archive/fox.txt && rm notes/fox-name-only && ln archive/deep/es.md notes/es-link`)
	expect(nil, "fox")
	expect([]string{"/archive/fox.txt"}, "animals")
	expect([]string{"/archive/deep/es.md", "/notes/es-link"}, "elasticsearch")
	expect([]string{"/notes/es-link"}, "elasticsearch", "--under", "/notes")

	// Mistakes: one line, status 2.
	for _, args := range [][]string{{}, {"a", "b"}, {"--name", "*", "--iname", "*"}, {"x", "--under", "relative"}} {
		r := mounttest.Run(t, mounttest.Cmd{Args: append([]string{"search", "--es-url", f.URL, "--index", f.Index}, args...), Env: []string{"ELASTICSEARCH_URL="}, Limit: time.Minute})
		out, code := r.Out, r.Code
		if code != 2 || len(strings.Split(strings.TrimSpace(out), "\n")) != 1 {
			t.Errorf("search %q: status %d, want 2 and one line:\n%s", args, code, out)
		}
	}
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"search", "--es-url", f.URL, "--index", f.Index, "--name", "[ab"}, Env: []string{"ELASTICSEARCH_URL="}, Limit: time.Minute})
	out, code := r.Out, r.Code
	if code != 1 || !strings.Contains(out, "unclosed [") {
		t.Errorf("search --name '[ab': status %d:\n%s", code, out)
	}
	// The files are intact: text chunks read back byte for byte.
	data, err := os.ReadFile(filepath.Join(m.Dir, "archive", "big.txt"))
	if err != nil || len(data) != 2500009 || strings.Count(string(data), "a") != 2500000 || !strings.HasSuffix(string(data), " needle \n") {
		t.Errorf("big.txt read back: %d bytes, %v", len(data), err)
	}
}
