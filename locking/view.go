package locking

import (
	"context"
	"errors"
	"fmt"

	"github.com/esfs/esfs/store"
)

// View is the one way to read the path index as readers must see it: every
// session (a mount, or an admin command) has one, and every reader of the
// tree, the mount, search, import, export and fsck, goes through it.
//
// A rename in flight leaves intents on path documents: its new names are
// staged before its commit point, its old names removed after it. Readers
// must see the old names before the commit point and the new ones after
// it, never both and never neither; the view resolves each intent against
// the rename's record and returns only what readers see. Searches are
// near-realtime, so a hit that carries an intent may be older than the
// record it is judged by (the rename may have committed or finished since
// the last refresh): such hits are read again in real time first.
type View struct {
	b Backend
	j *Journal
}

// NewView is the view of a session whose renames j journals.
func NewView(b Backend, j *Journal) *View {
	return &View{b: b, j: j}
}

// Entry is one path as readers see it.
type Entry struct {
	// Dentry is the document as readers see it: a name a committed rename
	// replaced shows the inode that replaces it. Ver is the version of the
	// stored document, for writes conditional on it. For a stored document
	// readers do not see, it is that document as stored.
	store.Dentry
	// Found: readers see the path.
	Found bool
	// Stored: a document is stored at the path, seen or not. One that is
	// not seen is the other side of a rename in flight, or garbage of a
	// finished or aborted one that whoever holds the path's lock may clear.
	Stored bool
}

// Get reads path in real time. A path nobody sees is not an error: the
// entry says whether it is found, and whether a document holds the name.
func (v *View) Get(ctx context.Context, path string) (Entry, error) {
	d, err := v.b.GetDentry(ctx, path)
	if errors.Is(err, store.ErrNotFound) {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	vis, ok, err := v.Resolve(ctx, d)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Dentry: vis, Found: ok, Stored: true}, nil
}

// GetMany reads paths in real time, in one round trip while no rename is
// in flight on them. Entries are in the order of paths.
func (v *View) GetMany(ctx context.Context, paths []string) ([]Entry, error) {
	res, err := v.b.GetDentries(ctx, paths)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(res))
	for i, r := range res {
		if errors.Is(r.Err, store.ErrNotFound) {
			continue
		}
		if r.Err != nil {
			return nil, r.Err
		}
		vis, ok, err := v.Resolve(ctx, r.Dentry)
		if err != nil {
			return nil, err
		}
		out[i] = Entry{Dentry: vis, Found: ok, Stored: true}
	}
	return out, nil
}

// List pages through the entries of dir that readers see, in name order.
// The listing is near-realtime: the caller refreshes first when it must
// hold every acknowledged write.
func (v *View) List(dir string, pageSize int) *Pages {
	return &Pages{v: v, sc: v.b.ListDir(dir, pageSize)}
}

// Search pages through the paths that match query (see
// store.Store.SearchPaths) and that readers see.
func (v *View) Search(query string, inos []uint64, f store.SearchFilter, pageSize int) (*Pages, error) {
	sc, err := v.b.SearchPaths(query, inos, f, pageSize)
	if err != nil {
		return nil, err
	}
	return &Pages{v: v, sc: sc}, nil
}

// scanRounds bounds how many snapshots Scan takes while renames keep
// committing in the subtree it lists.
const scanRounds = 20

// Scan pages through root and every path below it that readers see, in
// path order, as one consistent tree: a rename in flight shows entirely
// under its old names or entirely under its new ones. It refreshes first,
// so it holds every write acknowledged before it was called.
//
// The scan reads one point-in-time snapshot, but the records that its
// intents are judged by are read later, and a rename's state only moves
// forward. A rename found before its commit point after the snapshot was
// taken was before it in the snapshot too: its documents are judged by
// that record as read, whatever the rename does during the scan (the old
// names; its new ones may not even be all staged in the snapshot). A
// rename found past its commit point may have been staging in the
// snapshot, whose unstaged old names would then show beside its new
// ones: the snapshot is taken again, and in the new one the rename is
// known to be past its commit point, whose documents are judged in real
// time as any listing's.
func (v *View) Scan(ctx context.Context, root string) (*Pages, error) {
	committed := map[string]bool{} // seen past their commit point before the snapshot
	for round := 0; ; round++ {
		if err := v.b.Refresh(ctx, store.SearchedPaths); err != nil {
			return nil, err
		}
		sc := v.b.ScanTree(root, store.DefaultPageSize)
		ops, err := sc.IntentOps(ctx)
		if err != nil {
			sc.Close()
			return nil, err
		}
		pinned := map[string]store.OpRecord{}
		again := false
		for _, op := range ops {
			if committed[op] {
				continue
			}
			rec, err := v.j.record(ctx, op)
			if err != nil {
				sc.Close()
				return nil, err
			}
			switch {
			case rec.State == store.OpPrepared:
				pinned[op] = rec
			case rec.State == store.OpDone && rec.Aborted:
				// Rolled back: its old names, whenever it is judged.
			default:
				committed[op] = true
				again = true
			}
		}
		if !again {
			return &Pages{v: v, sc: sc, pinned: pinned}, nil
		}
		sc.Close()
		if round >= scanRounds {
			return nil, fmt.Errorf("renames kept committing in %s while it was listed (%d snapshots)", root, round+1)
		}
	}
}

// Pages is a listing of what readers see, a page at a time.
type Pages struct {
	v  *View
	sc *store.Scanner
	// pinned: operations that a Scan judges by their record as read when
	// it was opened.
	pinned map[string]store.OpRecord
}

// Next returns the next page of entries readers see, or nil at the end. A
// page may be empty (all its documents hidden) without being the end.
// Documents that fail to decode are returned in bad, and the listing goes
// on, as store.Scanner's.
func (p *Pages) Next(ctx context.Context) (page []store.Dentry, bad []error, err error) {
	page, bad, err = p.sc.Next(ctx)
	if err != nil || page == nil {
		return nil, bad, err
	}
	page, err = p.v.visiblePage(ctx, page, p.pinned)
	if err != nil {
		return nil, bad, err
	}
	return page, bad, nil
}

// Close releases the listing's snapshot, if any. Safe to call twice.
func (p *Pages) Close() { p.sc.Close() }

// visiblePage resolves a page of search hits for readers, so that a
// listing never shows both the old and the new name of a rename, or
// neither. Hits without an intent are consistent with each other as of the
// last refresh. A hit carrying an intent may be stale (search is
// near-realtime): it is judged by its operation's record, read after the
// search, once for the page (a directory renamed moments ago carries one
// operation's intent on every entry). Until an operation is DONE its locks
// keep everyone else from its paths, and whatever it did to a hit since
// (a new name's intent stripped, an old name deleted) resolves as the hit
// does: such hits are judged as they are. A hit of a DONE operation may
// since have been finished, or taken by a later operation: it is read
// again in real time and resolved as it is now. Hits of a pinned
// operation are judged as they are, by the pinned record.
func (v *View) visiblePage(ctx context.Context, page []store.Dentry, pinned map[string]store.OpRecord) ([]store.Dentry, error) {
	recs := map[string]store.OpRecord{}
	recordOf := func(op string) (store.OpRecord, error) {
		if rec, ok := pinned[op]; ok {
			return rec, nil
		}
		if rec, ok := recs[op]; ok {
			return rec, nil
		}
		rec, err := v.j.record(ctx, op)
		if err == nil {
			recs[op] = rec
		}
		return rec, err
	}
	var again []string
	for _, d := range page {
		if _, pin := pinned[d.Intent.Op]; d.Intent.Op == "" || pin {
			continue
		}
		rec, err := recordOf(d.Intent.Op)
		if err != nil {
			return nil, err
		}
		if rec.State == store.OpDone {
			again = append(again, d.Path)
		}
	}
	current := map[string]store.DentryResult{}
	if len(again) > 0 {
		res, err := v.b.GetDentries(ctx, again)
		if err != nil {
			return nil, err
		}
		for i, r := range res {
			current[again[i]] = r
		}
	}
	out := page[:0]
	for _, d := range page {
		op := d.Intent.Op
		if op == "" {
			out = append(out, d)
			continue
		}
		rec, err := recordOf(op)
		if err != nil {
			return nil, err
		}
		var (
			vis store.Dentry
			ok  bool
		)
		_, pin := pinned[op]
		if pin || rec.State != store.OpDone {
			vis, ok, err = visibleAs(d, rec)
		} else {
			r := current[d.Path]
			if errors.Is(r.Err, store.ErrNotFound) {
				continue // gone since the refresh
			}
			if r.Err != nil {
				return nil, r.Err
			}
			switch now := r.Dentry; now.Intent.Op {
			case "":
				vis, ok = now, true // finished since the refresh
			case op:
				// Read after the record said DONE: a new name still
				// carrying it is a stray.
				vis, ok, err = visibleAs(now, rec)
			default:
				var later store.OpRecord
				if later, err = recordOf(now.Intent.Op); err == nil {
					vis, ok, err = v.resolveAs(ctx, now, later)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, vis)
		}
	}
	return out, nil
}

// Resolve returns document d, which carries an intent, as readers see it
// (false if they do not see it at all), judged by its operation's record,
// read after it.
func (v *View) Resolve(ctx context.Context, d store.Dentry) (store.Dentry, bool, error) {
	if d.Intent.Op == "" {
		return d, true, nil
	}
	rec, err := v.j.record(ctx, d.Intent.Op)
	if err != nil {
		return d, false, err
	}
	return v.resolveAs(ctx, d, rec)
}

// resolveAs is Resolve with the record rec, read after d. A new name
// hidden because its rename is DONE was either read before the rename
// finished (which strips its intent: readers must see it) or is a stray, a
// late write after the rename ended: it is read once more, now that the
// record is known final, to tell which.
func (v *View) resolveAs(ctx context.Context, d store.Dentry, rec store.OpRecord) (store.Dentry, bool, error) {
	vis, ok, err := visibleAs(d, rec)
	if err != nil || ok || d.Intent.Role != store.RoleDst || rec.State != store.OpDone || rec.Aborted {
		return vis, ok, err
	}
	now, err := v.b.GetDentry(ctx, d.Path)
	if errors.Is(err, store.ErrNotFound) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	if now.Intent.Op == d.Intent.Op {
		return now, false, nil // a stray, which the sweepers remove
	}
	return v.j.visible(ctx, now)
}
