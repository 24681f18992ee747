package mounttest

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// Populate writes directory root (absolute in the filesystem; it and any
// missing ancestor other than "/" must not exist yet) and the files
// root/name, with content(name) as their data (empty files when content is
// nil), straight into the index as a mount's creates would leave them, in a
// few bulk requests: a mount takes minutes for thousands of files on a
// small machine, and the tests and benchmarks using this are about what
// comes after the creates.
func Populate(t testing.TB, f *FS, root string, names []string, content func(name string) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	now := time.Now().UnixNano()
	var made []store.Inode // in the order of paths
	var paths []string
	subdirs := map[string]uint32{}                 // directory -> subdirectories made in it
	inoOf := map[string]uint64{"/": store.RootIno} // directory -> its inode, its files' Parents
	mk := func(path string, typ store.FileType, size int64) uint64 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		ino := binary.LittleEndian.Uint64(b[:])>>1 | 1<<40
		mode := uint32(0o644)
		if typ == store.TypeDir {
			mode = 0o755
			parent, _ := store.Split(path)
			subdirs[parent]++
		}
		a := store.Inode{Ino: ino, Type: typ, Mode: mode, Nlink: 1, Size: size,
			Atime: now, Mtime: now, Ctime: now, Btime: now}
		if dir, _ := store.Split(path); typ != store.TypeDir {
			a.Parents = []uint64{inoOf[dir]}
		}
		made = append(made, a)
		paths = append(paths, path)
		return ino
	}
	dirs := map[string]bool{"/": true}
	var ensure func(p string)
	ensure = func(p string) {
		if dirs[p] {
			return
		}
		parent, _ := store.Split(p)
		ensure(parent)
		dirs[p] = true
		inoOf[p] = mk(p, store.TypeDir, 0)
	}
	ensure(root)
	var data bytes.Buffer
	for _, n := range names {
		p := root + "/" + n
		dir, _ := store.Split(p)
		ensure(dir)
		c := ""
		if content != nil {
			c = content(n)
		}
		ino := mk(p, store.TypeFile, int64(len(c)))
		if c != "" {
			fmt.Fprintf(&data, `{"index":{"_index":%q,"_id":"%d.0"}}`+"\n", f.Index+"-data", ino)
			fmt.Fprintf(&data, `{"ino":%d,"chunk":0,"data":%q}`+"\n", ino, base64.StdEncoding.EncodeToString([]byte(c)))
		}
	}
	// Directories' link counts as mkdir keeps them: 2 plus subdirectories.
	var ops []store.BulkOp
	for i, a := range made {
		if a.Type == store.TypeDir {
			a.Nlink = 2 + subdirs[paths[i]]
		}
		oi := store.CreateInode(a)
		if err := oi.Err(); err != nil {
			t.Fatal(err)
		}
		od := store.CreateDentry(store.Dentry{Path: paths[i], Ino: a.Ino, Type: a.Type})
		if err := od.Err(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, oi, od)
	}
	res, err := f.Store.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("populating %s: %v", root, r.Err)
		}
	}
	if n := subdirs["/"]; n > 0 {
		if _, err := f.Store.AddDirLinks(ctx, store.RootIno, int(n), 0); err != nil {
			t.Fatalf("counting the new directories in /: %v", err)
		}
	}
	if data.Len() > 0 {
		req, _ := http.NewRequestWithContext(ctx, "POST", strings.TrimSuffix(f.URL, "/")+"/_bulk", &data)
		req.Header.Set("Content-Type", "application/x-ndjson")
		hres, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(hres.Body)
		hres.Body.Close()
		var out struct {
			Errors bool `json:"errors"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.Errors || hres.StatusCode != 200 {
			t.Fatalf("writing data chunks: %s %.500s", hres.Status, raw)
		}
	}
	if err := f.Store.Refresh(ctx, store.SearchedPaths); err != nil {
		t.Fatal(err)
	}
}
