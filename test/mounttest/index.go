package mounttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/esfs/esfs/store"
)

// The invariants a filesystem's indices hold once no operation is in
// flight, read from the indices themselves rather than through a mount, so
// that a mount's visibility rules cannot hide a leftover:
//
//   - no path document carries an intent (an unfinished rename);
//   - no path appears twice, and the root exists, as a directory, with the
//     root's inode number;
//   - every document's parent exists (else it is an orphan) and is a
//     directory;
//   - no inode is named by more paths than its link count, and a directory
//     by one path only;
//   - no lock document is left (no holder, no waiter);
//   - no operation record is prepared, committed or aborted (done is fine).
//
// With Inodes, also: every path document's inode exists, with the same
// type; every directory has 2 links plus its subdirectories; and every
// inode document is named by some path (else it leaked: not a lost file,
// but in a test without crashes an operation forgot to clean up). With
// Data, also the data chunks whose inode no path names.

// IndexCheck says how deep CheckIndex reads.
type IndexCheck struct {
	// Inodes reads every inode (of every path, and the whole inode
	// index); without it only inodes that several paths name are read,
	// which keeps a check polled every few milliseconds cheap.
	Inodes bool
	// Data counts the data chunks of inodes that no path names.
	Data bool
}

// IndexReport is one reading of the indices.
type IndexReport struct {
	// Problems are invariant violations, orphans and leaks apart.
	Problems []string
	// Orphans are path documents whose parent document is missing, as
	// `"/path" (parent "/dir" missing)`.
	Orphans []string
	// LeakedInodes are inode documents that no path names (Inodes only).
	LeakedInodes []string
	// StrayChunks counts data chunks of inodes no path names (Data only).
	StrayChunks int
	// Intents, Locks and Ops count the problems that a live mount's sweeper
	// clears once dead sessions expire; while any is left, the others may
	// be transient too (a rename between its stage and its finish).
	Intents, Locks, Ops int
	// Paths and Inodes count the documents read (Inodes: with Inodes only).
	Paths, Inodes int
	// Files holds the paths of regular files.
	Files map[string]bool
}

// Settled reports whether nothing is left for a sweeper to clear, or
// nothing is wrong at all.
func (r IndexReport) Settled() bool {
	return len(r.Problems)+len(r.Orphans)+len(r.LeakedInodes) == 0 || r.Intents+r.Locks+r.Ops == 0
}

// CheckIndex refreshes f's indices and reads them for the invariants above.
// An error means the indices could not be read, not that they are wrong.
func CheckIndex(ctx context.Context, f *FS, check IndexCheck) (IndexReport, error) {
	st := f.Store
	rep := IndexReport{Files: map[string]bool{}}
	bad := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }

	if err := st.Refresh(ctx, store.SearchedPaths); err != nil {
		return rep, err
	}
	docs := map[string]store.Dentry{}
	var order []string
	sc := st.ScanTree("/", store.DefaultPageSize)
	for {
		page, corrupt, err := sc.Next(ctx)
		if err != nil {
			sc.Close()
			return rep, fmt.Errorf("scanning the path index: %w", err)
		}
		for _, e := range corrupt {
			bad("corrupt path document: %v", e)
		}
		if page == nil {
			break
		}
		for _, d := range page {
			if _, dup := docs[d.Path]; dup {
				bad("path %q appears in two documents", d.Path)
				continue
			}
			docs[d.Path] = d
			order = append(order, d.Path)
			if d.Intent.Op != "" {
				rep.Intents++
				bad("path %q (ino %d, %s) carries the intent of operation %s (role %s)", d.Path, d.Ino, d.Type, d.Intent.Op, d.Intent.Role)
			}
			if d.Type == store.TypeFile {
				rep.Files[d.Path] = true
			}
		}
	}
	sc.Close()
	rep.Paths = len(docs)

	if root, ok := docs["/"]; !ok {
		bad("the root has no path document")
	} else if root.Type != store.TypeDir || root.Ino != store.RootIno {
		bad("the root document is a %s with ino %d", root.Type, root.Ino)
	}
	byIno := map[uint64][]string{}
	for _, p := range order {
		d := docs[p]
		byIno[d.Ino] = append(byIno[d.Ino], p)
		if p == "/" {
			continue
		}
		dir, _ := store.Split(p)
		parent, ok := docs[dir]
		switch {
		case !ok:
			rep.Orphans = append(rep.Orphans, fmt.Sprintf("%q (parent %q missing)", p, dir))
		case parent.Type != store.TypeDir:
			bad("path %q has a parent %q that is a %s", p, dir, parent.Type)
		}
	}

	var inos []uint64
	for ino, paths := range byIno {
		if check.Inodes || len(paths) > 1 {
			inos = append(inos, ino)
		}
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	attrs := map[uint64]store.Inode{}
	for i := 0; i < len(inos); i += 500 {
		batch := inos[i:min(i+500, len(inos))]
		res, err := st.GetInodes(ctx, batch)
		if err != nil {
			return rep, fmt.Errorf("reading inodes: %w", err)
		}
		for k, r := range res {
			paths := byIno[batch[k]]
			if r.Err != nil {
				if errors.Is(r.Err, store.ErrNotFound) {
					bad("inode %d of %q does not exist", batch[k], paths)
				} else {
					bad("inode %d of %q: %v", batch[k], paths, r.Err)
				}
				continue
			}
			attrs[batch[k]] = r.Inode
		}
	}
	for _, ino := range inos {
		paths := byIno[ino]
		a, ok := attrs[ino]
		if !ok {
			continue
		}
		for _, p := range paths {
			// A document still carrying an intent may legitimately
			// disagree (an overwritten target names the old inode).
			if d := docs[p]; d.Intent.Op == "" && d.Type != a.Type {
				bad("path %q is a %s but its inode %d is a %s", p, d.Type, ino, a.Type)
			}
		}
		if len(paths) > 1 && (a.Type == store.TypeDir || int(a.Nlink) < len(paths)) {
			sort.Strings(paths)
			bad("inode %d (%s, nlink %d) is named by %d paths: %q", ino, a.Type, a.Nlink, len(paths), paths)
		}
	}

	locks, err := st.SearchLocks(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing locks: %w", err)
	}
	for _, l := range locks {
		if delegationsOnly(l) {
			// A delegation is a lease a mount keeps while it lives (and
			// that the next change drops once its holder is dead), not
			// the leftover of an operation.
			continue
		}
		rep.Locks++
		bad("lock document left on %q: holders %s, waiters %s", lockName(l), holders(l.Holders), waiters(l.Waiters))
	}
	recs, err := st.SearchOps(ctx, store.OpPrepared, store.OpCommitted, store.OpAborted)
	if err != nil {
		return rep, fmt.Errorf("listing operations: %w", err)
	}
	for _, r := range recs {
		rep.Ops++
		bad("operation %s left %s (owner %s, epoch %d): %s %q -> %q", r.ID, r.State, r.Owner, r.Epoch, r.SrcType, r.Src, r.Dst)
	}

	if check.Inodes {
		all, err := allInodes(ctx, f)
		if err != nil {
			return rep, err
		}
		rep.Inodes = len(all)
		inodes := map[uint64]store.Inode{}
		for _, a := range all {
			inodes[a.Ino] = a
			if _, named := byIno[a.Ino]; !named {
				rep.LeakedInodes = append(rep.LeakedInodes, fmt.Sprintf("inode %d (%s, nlink %d, size %d) is named by no path (leaked)", a.Ino, a.Type, a.Nlink, a.Size))
			}
		}
		// While intents are left, link counts may be mid-rename.
		if rep.Intents == 0 {
			subdirs := map[string]int{}
			for p, d := range docs {
				if d.Type == store.TypeDir && p != "/" {
					dir, _ := store.Split(p)
					subdirs[dir]++
				}
			}
			for _, p := range order {
				d := docs[p]
				if a, ok := inodes[d.Ino]; ok && d.Type == store.TypeDir && a.Type == store.TypeDir && int(a.Nlink) != 2+subdirs[p] {
					bad("directory %q (inode %d) has %d links but %d subdirectories", p, d.Ino, a.Nlink, subdirs[p])
				}
			}
		}
	}
	if check.Data {
		err := searchAll(ctx, f, "-data", []string{"ino", "chunk"}, []string{"ino"}, func(src json.RawMessage) error {
			var c struct {
				Ino uint64 `json:"ino"`
			}
			if err := json.Unmarshal(src, &c); err != nil {
				return err
			}
			if len(byIno[c.Ino]) == 0 {
				rep.StrayChunks++
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
	}
	sort.Strings(rep.Problems)
	sort.Strings(rep.Orphans)
	return rep, nil
}

func lockName(l store.LockDoc) string {
	if l.ID == store.GlobalLockID {
		return "(global)"
	}
	return l.Path
}

func holders(hs []store.Holder) string {
	var s []string
	for _, h := range hs {
		s = append(s, fmt.Sprintf("%s by op %s", h.Mode, h.Op))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func waiters(ws []store.Waiter) string {
	var s []string
	for _, w := range ws {
		s = append(s, fmt.Sprintf("op %s ticket %s", w.Op, w.Ticket))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// allInodes lists every inode document (number, type, links, size).
func allInodes(ctx context.Context, f *FS) ([]store.Inode, error) {
	var out []store.Inode
	err := searchAll(ctx, f, "-inodes", []string{"ino"}, []string{"ino", "type", "nlink", "size"}, func(src json.RawMessage) error {
		var h struct {
			Ino   uint64 `json:"ino"`
			Type  string `json:"type"`
			Nlink uint32 `json:"nlink"`
			Size  int64  `json:"size"`
		}
		if err := json.Unmarshal(src, &h); err != nil {
			return err
		}
		a := store.Inode{Ino: h.Ino, Nlink: h.Nlink, Size: h.Size}
		for typ := store.TypeFile; typ <= store.TypeBlockDev; typ++ {
			if typ.String() == h.Type {
				a.Type = typ
			}
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// searchAll refreshes index P<suffix> and hands each document's source
// fields to each, paging on the unique sort keys. It asks the cluster
// directly rather than through the store, so that the checker does not
// trust the code it checks.
func searchAll(ctx context.Context, f *FS, suffix string, keys, fields []string, each func(json.RawMessage) error) error {
	url, _, _ := strings.Cut(f.URL, ",") // a node of the cluster (the first one lives in every test)
	base := strings.TrimSuffix(url, "/") + "/" + f.Index + suffix
	do := func(method, url string, body string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			return nil, fmt.Errorf("%s %s: %s: %s", method, url, res.Status, b)
		}
		return b, nil
	}
	if _, err := do("POST", base+"/_refresh", ""); err != nil {
		return err
	}
	var sortBy []any
	for _, k := range keys {
		sortBy = append(sortBy, map[string]any{k: "asc"})
	}
	var after []json.RawMessage // raw: inode numbers do not survive float64
	for {
		q := map[string]any{"size": 1000, "sort": sortBy, "_source": fields, "track_total_hits": false}
		if after != nil {
			q["search_after"] = after
		}
		body, _ := json.Marshal(q)
		raw, err := do("POST", base+"/_search", string(body))
		if err != nil {
			return err
		}
		var page struct {
			Hits struct {
				Hits []struct {
					Source json.RawMessage   `json:"_source"`
					Sort   []json.RawMessage `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("listing %s: %w", suffix, err)
		}
		for _, h := range page.Hits.Hits {
			if err := each(h.Source); err != nil {
				return fmt.Errorf("listing %s: %w", suffix, err)
			}
		}
		if len(page.Hits.Hits) < 1000 {
			return nil
		}
		after = page.Hits.Hits[len(page.Hits.Hits)-1].Sort
	}
}

// delegationsOnly: l is a directory's delegation document holding only
// delegations (read or write), nothing waiting.
func delegationsOnly(l store.LockDoc) bool {
	if !store.IsDelegLock(l.ID) || len(l.Waiters) > 0 {
		return false
	}
	for _, h := range l.Holders {
		if h.Mode != store.ReadDeleg && h.Mode != store.Exclusive {
			return false
		}
	}
	return true
}
