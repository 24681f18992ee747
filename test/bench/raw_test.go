package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// raw talks to the cluster with plain HTTP and the best requests for each
// job: the floors. It writes into the same indices as the filesystem under
// test (same mappings, same shards), below a root path no directory names,
// so a mount never lists what it writes.
type raw struct {
	t      testing.TB
	url    string
	prefix string
	c      *http.Client
}

func newRaw(t testing.TB, prefix string) *raw {
	return &raw{t: t, url: strings.TrimSuffix(testenv.URL(t), "/"), prefix: prefix,
		// No gzip, as esfs: compressing responses costs the cluster more
		// CPU than the bytes cost on a loopback or LAN.
		c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, DisableCompression: true}}}
}

func (r *raw) do(method, path string, body []byte) []byte {
	r.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, r.url+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if strings.Contains(path, "_bulk") {
		req.Header.Set("Content-Type", "application/x-ndjson")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := r.c.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	if res.StatusCode >= 300 && !(res.StatusCode == 404 && method == "GET") {
		r.t.Fatalf("%s %s: %s %.300s", method, path, res.Status, out)
	}
	if strings.Contains(path, "_bulk") && bytes.Contains(out[:min(len(out), 64)], []byte(`"errors":true`)) {
		r.t.Fatalf("%s %s: item errors %.500s", method, path, out)
	}
	return out
}

var rawIno struct {
	sync.Mutex
	n uint64
}

func nextIno() uint64 {
	rawIno.Lock()
	defer rawIno.Unlock()
	rawIno.n++
	return 1<<50 | rawIno.n
}

// pathDoc is a path document as esfs writes it (ASCII names need no
// encoding).
func pathDoc(path string, ino uint64, typ string) string {
	dir, name := store.Split(path)
	b, _ := json.Marshal(map[string]any{"path": path, "parent": dir, "name": name, "ino": ino, "type": typ})
	return string(b)
}

func inodeDoc(ino uint64, typ string) string {
	now := time.Now().UnixNano()
	b, _ := json.Marshal(map[string]any{"ino": ino, "type": typ, "mode": 0o644, "uid": 0, "gid": 0, "size": 0, "nlink": 1,
		"atime": now, "mtime": now, "ctime": now, "btime": now})
	return string(b)
}

// createAction is one op_type=create bulk item.
func (r *raw) createAction(index, id, doc string) string {
	return fmt.Sprintf(`{"create":{"_index":%q,"_id":%q}}`+"\n%s\n", index, id, doc)
}

func (r *raw) deleteAction(index, id string) string {
	return fmt.Sprintf(`{"delete":{"_index":%q,"_id":%q}}`+"\n", index, id)
}

// bulk sends items in requests of at most per items, with workers
// requests in flight: the way a tuned client writes many documents.
func (r *raw) bulk(items []string, per, workers int) {
	r.t.Helper()
	jobs := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range jobs {
				r.do("POST", "/_bulk", []byte(body))
			}
		}()
	}
	for i := 0; i < len(items); i += per {
		jobs <- strings.Join(items[i:min(i+per, len(items))], "")
	}
	close(jobs)
	wg.Wait()
}

// getPath is a realtime GET of one path document.
func (r *raw) getPath(path string) {
	r.do("GET", "/"+r.prefix+"/_doc/"+store.DocID(path), nil)
}

func (r *raw) refresh() { r.do("POST", "/"+r.prefix+"/_refresh", nil) }

// scanDir reads every child of dir with a point-in-time and search_after,
// in pages of page hits, and returns how many it saw.
func (r *raw) scanDir(dir string, page int) int {
	return r.scan(map[string]any{"term": map[string]any{"parent": dir}}, "name", page)
}

// scan reads every path document query matches, sorted by sortKey, with
// a point-in-time and search_after, in pages of page hits, and returns how
// many it saw.
func (r *raw) scan(query map[string]any, sortKey string, page int) int {
	var pit struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.do("POST", "/"+r.prefix+"/_pit?keep_alive=1m", nil), &pit); err != nil {
		r.t.Fatal(err)
	}
	defer r.do("DELETE", "/_pit", []byte(fmt.Sprintf(`{"id":%q}`, pit.ID)))
	n := 0
	var after []any
	for {
		req := map[string]any{"size": page, "query": query,
			"pit": map[string]any{"id": pit.ID, "keep_alive": "1m"}, "sort": []any{map[string]any{sortKey: "asc"}},
			"track_total_hits": false}
		if after != nil {
			req["search_after"] = after
		}
		body, _ := json.Marshal(req)
		var out struct {
			Hits struct {
				Hits []struct {
					Sort []any `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(r.do("POST", "/_search", body), &out); err != nil {
			r.t.Fatal(err)
		}
		hits := out.Hits.Hits
		n += len(hits)
		if len(hits) < page {
			return n
		}
		after = hits[len(hits)-1].Sort
	}
}

// chunkItems are the bulk items that store size bytes as 1 MiB chunk
// documents of inode ino, the way esfs stores file data.
func (r *raw) chunkItems(ino uint64, data []byte, chunk int) []string {
	var items []string
	for off, n := 0, 0; off < len(data); off, n = off+chunk, n+1 {
		end := min(off+chunk, len(data))
		doc := fmt.Sprintf(`{"ino":%d,"chunk":%d,"data":%q}`, ino, n, base64.StdEncoding.EncodeToString(data[off:end]))
		items = append(items, fmt.Sprintf(`{"index":{"_index":%q,"_id":"%d.%d"}}`+"\n%s\n", r.prefix+"-data", ino, n, doc))
	}
	return items
}

// readChunks reads chunks 0..n-1 of ino, per at a time per _mget, with
// workers in flight, and returns the bytes of _source received.
func (r *raw) readChunks(ino uint64, n, per, workers int) int {
	return r.readChunksOf(r.prefix+"-data", ino, n, per, workers)
}

// readChunksOf is readChunks from index.
func (r *raw) readChunksOf(index string, ino uint64, n, per, workers int) int {
	jobs := make(chan []string)
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ids := range jobs {
				body, _ := json.Marshal(map[string]any{"ids": ids})
				out := r.do("POST", "/"+index+"/_mget", body)
				mu.Lock()
				total += len(out)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i += per {
		var ids []string
		for k := i; k < min(i+per, n); k++ {
			ids = append(ids, fmt.Sprintf("%d.%d", ino, k))
		}
		jobs <- ids
	}
	close(jobs)
	wg.Wait()
	return total
}

func esVersion(t testing.TB) string {
	s, err := store.New(store.Config{URLs: []string{testenv.URL(t)}, RequestTimeout: 10 * time.Second})
	if err != nil {
		return "?"
	}
	defer s.Close()
	v, err := s.Admin().Version(context.Background())
	if err != nil {
		return "?"
	}
	return v
}
