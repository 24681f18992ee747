package bench

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// The protocol floor of the shared rows: what the protocol's minimum for
// each call costs as raw requests (docs/consistency.md's table), made by
// n clients at once, one per mount, each call's requests one after the
// other, into the filesystem's own indices (below rawRoot, which no mount
// lists).
//
//   - create: the lookup of the new name (a GET) and one bulk (inode, name,
//     the directory's times);
//   - rename: the lookup of the new name, the two names' locks (one bulk),
//     the re-check (one mget of the directories and both names), the
//     record with the stage (one bulk), the commit with the directory's
//     times (one bulk): the answer; then, not waited for, the finish (old
//     name deleted, intent stripped) and DONE with the release;
//   - handoff: a new file is a lookup and one bulk (inode, name, data, the
//     directory's times); reading it, a lookup and one mget (inode and
//     data).

// sharedFloor runs one repetition of the floor of sharedRep and, with hand
// > 0, of handoff; it returns the timed parts in their order.
func sharedFloor(t testing.TB, r *raw, n, k, rep, hand int) []time.Duration {
	t.Helper()
	dir := fmt.Sprintf("%s/shared-%d", rawRoot, rep)
	dirIno := nextIno()
	r.bulk([]string{
		r.createAction(r.prefix+"-inodes", strconv.FormatUint(dirIno, 10), inodeDoc(dirIno, "dir")),
		r.createAction(r.prefix, store.DocID(dir), pathDoc(dir, dirIno, "dir")),
	}, 10, 1)
	touch := func(ino uint64) string {
		now := time.Now().UnixNano()
		return fmt.Sprintf(`{"update":{"_index":%q,"_id":"%d","retry_on_conflict":5}}`+"\n"+`{"doc":{"mtime":%d,"ctime":%d}}`+"\n", r.prefix+"-inodes", ino, now, now)
	}
	name := func(prefix string, i, j int) string { return fmt.Sprintf("%s/%s%d-%d", dir, prefix, i, j) }
	create := onEach(t, n, func(i int) error {
		for j := 0; j < k; j++ {
			p := name("m", i, j)
			r.getPath(p)
			ino := nextIno()
			r.do("POST", "/_bulk", []byte(r.createAction(r.prefix+"-inodes", strconv.FormatUint(ino, 10), inodeDoc(ino, "file"))+
				r.createAction(r.prefix, store.DocID(p), pathDoc(p, ino, "file"))+touch(dirIno)))
		}
		return nil
	})
	r.refresh()

	var after sync.WaitGroup // the finishes, not waited for by the renames
	rename := onEach(t, n, func(i int) error {
		for j := 0; j < k; j++ {
			src, dst := name("m", i, j), name("r", i, j)
			op := fmt.Sprintf("raw-%d-%d-%d", rep, i, j)
			r.getPath(dst)
			lock := func(p string) string {
				b, _ := json.Marshal(map[string]any{"kind": "lock", "path": p,
					"holders": []any{map[string]any{"m": "x", "o": op, "s": "raw", "t": time.Now().UnixNano()}}})
				return r.createAction(r.prefix+"-locks", op+"-"+store.DocID(p), string(b))
			}
			r.do("POST", "/_bulk", []byte(lock(src)+lock(dst)))
			ids, _ := json.Marshal(map[string]any{"ids": []string{store.DocID(dir), store.DocID(dir), store.DocID(src), store.DocID(dst)}})
			r.do("POST", "/"+r.prefix+"/_mget", ids)
			record := func(state string) string {
				b, _ := json.Marshal(map[string]any{"kind": "op", "op": op, "owner": "raw", "epoch": 1, "state": state,
					"body": map[string]any{"src": src, "dst": dst, "src_type": "file"}})
				return string(b)
			}
			ino := nextIno()
			staged := func(p, role string) string {
				d, pn := store.Split(p)
				b, _ := json.Marshal(map[string]any{"path": p, "parent": d, "name": pn, "ino": ino, "type": "file", "op": op, "role": role})
				return string(b)
			}
			r.do("POST", "/_bulk", []byte(r.createAction(r.prefix+"-locks", op, record("prepared"))+
				r.createAction(r.prefix, store.DocID(dst), staged(dst, "dst"))+
				fmt.Sprintf(`{"index":{"_index":%q,"_id":%q}}`+"\n%s\n", r.prefix, store.DocID(src), staged(src, "src"))))
			r.do("POST", "/_bulk", []byte(fmt.Sprintf(`{"index":{"_index":%q,"_id":%q}}`+"\n%s\n", r.prefix+"-locks", op, record("committed"))+touch(dirIno)))
			after.Add(1)
			go func() {
				defer after.Done()
				r.do("POST", "/_bulk", []byte(r.deleteAction(r.prefix, store.DocID(src))+
					fmt.Sprintf(`{"index":{"_index":%q,"_id":%q}}`+"\n%s\n", r.prefix, store.DocID(dst), pathDoc(dst, ino, "file"))))
				r.do("POST", "/_bulk", []byte(r.deleteAction(r.prefix+"-locks", op+"-"+store.DocID(src))+
					r.deleteAction(r.prefix+"-locks", op+"-"+store.DocID(dst))+
					fmt.Sprintf(`{"index":{"_index":%q,"_id":%q}}`+"\n%s\n", r.prefix+"-locks", op, record("done"))))
			}()
		}
		return nil
	})
	after.Wait()
	took := []time.Duration{create, rename}
	if hand == 0 {
		return took
	}
	write := func(p string) {
		r.getPath(p)
		ino := nextIno()
		body := []byte("from " + p + "\n")
		items := append([]string{
			r.createAction(r.prefix+"-inodes", strconv.FormatUint(ino, 10), inodeDoc(ino, "file")),
			r.createAction(r.prefix, store.DocID(p), pathDoc(p, ino, "file")),
		}, r.chunkItems(ino, body, 1<<20)...)
		r.do("POST", "/_bulk", []byte(strings.Join(append(items, touch(dirIno)), "")))
	}
	read := func(p string) {
		out := r.do("GET", "/"+r.prefix+"/_doc/"+store.DocID(p), nil)
		var doc struct {
			Source struct {
				Ino uint64 `json:"ino"`
			} `json:"_source"`
		}
		if err := json.Unmarshal(out, &doc); err != nil || doc.Source.Ino == 0 {
			t.Fatalf("raw handoff: %s not found (%v): %.200s", p, err, out)
		}
		docs, _ := json.Marshal(map[string]any{"docs": []any{
			map[string]any{"_index": r.prefix + "-inodes", "_id": strconv.FormatUint(doc.Source.Ino, 10)},
			map[string]any{"_index": r.prefix + "-data", "_id": fmt.Sprintf("%d.0", doc.Source.Ino)},
		}})
		r.do("POST", "/_mget", docs)
	}
	start := time.Now()
	for i := 0; i < hand; i++ {
		h, g := fmt.Sprintf("%s/h%d", dir, i), fmt.Sprintf("%s/g%d", dir, i)
		write(h)
		read(h)
		write(g)
		read(g)
	}
	return append(took, time.Since(start))
}
