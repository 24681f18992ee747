package cmd

// Walking what find's starting points hold: the index's path and inode
// documents read page by page, in the order GNU find prints them.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// findRun is one run of esfs find.
type findRun struct {
	x         *findExpr
	st        *store.Store
	view      *locking.View
	out       *bufio.Writer
	ids       *idNames
	chunkSize int64
	act       sides // holds for every file an action runs for
	failed    bool  // an error was reported: exit status 1
}

// fentry is one file as find judges it.
type fentry struct {
	path  string // as printed
	start *findStart
	depth int
	d     store.Dentry // its path document as readers see it
	attr  store.Inode  // its attributes, when the expression needs them
	empty bool         // a directory without entries
}

// fail reports an error about one file on stderr, as GNU find does, and
// goes on.
func (fr *findRun) fail(format string, a ...any) {
	fr.out.Flush()
	fmt.Fprintf(os.Stderr, "esfs find: "+format+"\n", a...)
	fr.failed = true
}

// walk prints what the expression selects at and below start.
func (fr *findRun) walk(ctx context.Context, s *findStart) error {
	if s.missing != "" {
		fr.fail("%s", s.missing)
		return nil
	}
	ent, err := fr.view.Get(ctx, s.fsPath)
	if err != nil {
		return err
	}
	if !ent.Found {
		fr.fail("‘%s’: %s", s.given, fr.missingWhy(ctx, s.fsPath))
		return nil
	}
	if strings.HasSuffix(s.given, "/") && ent.Type != store.TypeDir {
		fr.fail("‘%s’: Not a directory", s.given)
		return nil
	}
	root := &fentry{path: s.given, start: s, d: ent.Dentry}
	entries := []*fentry{root}
	x := fr.x
	if root.d.Type == store.TypeDir && x.maxDepth != 0 {
		below, err := fr.below(ctx, s)
		if err != nil {
			return err
		}
		entries = append(entries, below...)
	}
	if x.needs.attr {
		// Below the root, attributes came with the documents.
		a, err := fr.st.GetInode(ctx, root.d.Ino)
		if errors.Is(err, store.ErrNotFound) {
			fr.fail("‘%s’: No such file or directory", s.given)
			return nil
		}
		if err != nil {
			return err
		}
		root.attr = a
	}
	if x.needs.empty {
		if err := fr.markEmpty(ctx, entries); err != nil {
			return err
		}
	}
	rest := entries[1:]
	sort.Slice(rest, func(i, j int) bool { return pathLess(rest[i].d.Path, rest[j].d.Path, x.depth) })
	if x.depth {
		entries = append(rest, root)
	}
	for _, e := range entries {
		if e.depth < x.minDepth || x.maxDepth >= 0 && e.depth > x.maxDepth {
			continue
		}
		x.root.eval(fr, e)
	}
	return nil
}

// missingWhy is why a path names nothing: a directory above it is not
// one, or it is not there.
func (fr *findRun) missingWhy(ctx context.Context, path string) string {
	for dir, _ := store.Split(path); dir != "" && dir != "/"; dir, _ = store.Split(dir) {
		if e, err := fr.view.Get(ctx, dir); err == nil && e.Found {
			if e.Type != store.TypeDir {
				return "Not a directory"
			}
			break
		}
	}
	return "No such file or directory"
}

// below fetches the files below start that may produce output: those
// whose path and inode documents meet the pushed-down conditions, with
// their attributes if the expression needs them. With a condition on
// inodes that few meet, those inodes are found first and their paths
// looked up; else the paths are scanned and their inodes read. Pages are
// read one after the other, and what each needs next (its inodes, or its
// inodes' paths) is asked for beside the next page (findInFlight at
// once): the work is waiting on Elasticsearch more than computing.
func (fr *findRun) below(ctx context.Context, s *findStart) ([]*fentry, error) {
	x := fr.x
	root := s.fsPath
	pathCond := fr.act.path
	if x.maxDepth >= 0 || x.minDepth > 1 {
		pathCond = store.AllOf(pathCond, store.PathDepth(root, max(1, x.minDepth), x.maxDepth))
	}
	inodeCond := fr.act.inode
	if !x.needs.attr {
		inodeCond = store.TrueCond // only -type: the path documents know it
	}
	if pathCond.IsFalse() || inodeCond.IsFalse() {
		return nil, nil
	}
	inodeFirst := false
	if !inodeCond.IsTrue() {
		ni, err := fr.st.CountInodes(ctx, inodeCond)
		if err != nil || ni == 0 {
			return nil, err
		}
		// A page of inodes and their paths cost no more than a scan of
		// paths would: more than that, whichever is fewer.
		inodeFirst = ni <= findPageSize
		if !inodeFirst {
			np, err := fr.st.CountPaths(ctx, root, pathCond)
			if err != nil {
				return nil, err
			}
			inodeFirst = ni < np
		}
	}
	p := &findPipe{fr: fr, ctx: ctx, s: s, slots: make(chan struct{}, findInFlight)}
	if inodeFirst {
		// The paths of a page of inodes, wherever they are: the inode
		// numbers are the narrowest condition (the root, and what else
		// the paths must meet, is judged here).
		sc := fr.st.FindInodes(inodeCond, findPageSize)
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil {
				p.wait()
				return nil, err
			}
			for _, b := range bad {
				fr.fail("skipping a damaged inode document: %v", b)
			}
			if page == nil {
				break
			}
			p.run(func() (findBatch, error) { return p.pathsOf(page) })
		}
	} else {
		pages, err := fr.view.Search("", nil, store.SearchFilter{Under: root, Where: pathCond}, findPageSize)
		if err != nil {
			return nil, err
		}
		for {
			page, bad, err := pages.Next(ctx)
			if err != nil {
				pages.Close()
				p.wait()
				return nil, err
			}
			for _, b := range bad {
				fr.fail("skipping a damaged path document: %v", b)
			}
			if page == nil {
				break
			}
			p.run(func() (findBatch, error) { return p.withInodes(page, nil) })
		}
		pages.Close()
	}
	return p.collect()
}

// findInFlight bounds the requests a find has in flight at once.
const findInFlight = 3

// findPipe runs the second request of each page of find's scans beside
// the scan, and gathers their files.
type findPipe struct {
	fr    *findRun
	ctx   context.Context
	s     *findStart
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	done  []findBatch // GUARDED_BY(mu)
	err   error       // GUARDED_BY(mu): the first
}

// findBatch is what one page gave: files, and the paths whose inode
// was gone.
type findBatch struct {
	entries []*fentry
	gone    []string
}

func (p *findPipe) run(fn func() (findBatch, error)) {
	p.slots <- struct{}{}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.slots; p.wg.Done() }()
		b, err := fn()
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil && p.err == nil {
			p.err = err
		}
		p.done = append(p.done, b)
	}()
}

func (p *findPipe) wait() { p.wg.Wait() }

// collect waits for every page and returns their files, each path once.
func (p *findPipe) collect() ([]*fentry, error) {
	p.wait()
	if p.err != nil {
		return nil, p.err
	}
	var out []*fentry
	seen := map[string]bool{}
	for _, b := range p.done {
		for _, g := range b.gone {
			p.fr.fail("‘%s’: No such file or directory", g)
		}
		for _, e := range b.entries {
			if !seen[e.d.Path] {
				seen[e.d.Path] = true
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// pathsOf looks up the paths below the root of the inodes of page.
func (p *findPipe) pathsOf(page []store.Inode) (findBatch, error) {
	attrs := make(map[uint64]store.Inode, len(page))
	inos := make([]uint64, len(page))
	for i, a := range page {
		attrs[a.Ino] = a
		inos[i] = a.Ino
	}
	pages, err := p.fr.view.Search("", inos, store.SearchFilter{}, findPageSize)
	if err != nil {
		return findBatch{}, err
	}
	defer pages.Close()
	var all findBatch
	for {
		found, bad, err := pages.Next(p.ctx)
		if err != nil {
			return findBatch{}, err
		}
		if len(bad) > 0 {
			return findBatch{}, fmt.Errorf("a damaged path document: %w", bad[0])
		}
		if found == nil {
			return all, nil
		}
		b, err := p.withInodes(found, attrs)
		if err != nil {
			return findBatch{}, err
		}
		all.entries, all.gone = append(all.entries, b.entries...), append(all.gone, b.gone...)
	}
}

// withInodes makes the files of the path documents of page strictly
// below the root, with their attributes (from attrs, else read) if the
// expression needs them.
func (p *findPipe) withInodes(page []store.Dentry, attrs map[uint64]store.Inode) (findBatch, error) {
	root := p.s.fsPath
	var keep []store.Dentry
	for _, d := range page {
		if d.Path != root && store.IsWithin(d.Path, root) {
			keep = append(keep, d)
		}
	}
	var b findBatch
	if !p.fr.x.needs.attr {
		for _, d := range keep {
			b.entries = append(b.entries, p.fr.entry(p.s, d))
		}
		return b, nil
	}
	if attrs == nil {
		attrs = map[uint64]store.Inode{}
	}
	var want []uint64
	wanted := map[uint64]bool{}
	for _, d := range keep {
		if _, ok := attrs[d.Ino]; !ok && !wanted[d.Ino] {
			wanted[d.Ino] = true
			want = append(want, d.Ino)
		}
	}
	if len(want) > 0 {
		res, err := p.fr.st.GetInodes(p.ctx, want)
		if err != nil {
			return b, err
		}
		for _, r := range res {
			if r.Err == nil {
				attrs[r.Inode.Ino] = r.Inode
			} else if !errors.Is(r.Err, store.ErrNotFound) {
				return b, r.Err
			}
		}
	}
	for _, d := range keep {
		e := p.fr.entry(p.s, d)
		a, ok := attrs[d.Ino]
		if !ok {
			b.gone = append(b.gone, e.path)
			continue
		}
		e.attr = a
		b.entries = append(b.entries, e)
	}
	return b, nil
}

// entry is the file of path document d below start s, named as find
// names it: the starting point as given, then the path below it.
func (fr *findRun) entry(s *findStart, d store.Dentry) *fentry {
	rel := d.Path
	if s.fsPath != "/" {
		rel = d.Path[len(s.fsPath):]
	}
	p := s.given + rel
	if strings.HasSuffix(s.given, "/") {
		p = s.given + rel[1:]
	}
	return &fentry{path: p, start: s, depth: strings.Count(rel, "/"), d: d}
}

// markEmpty finds which directories of entries have no entries of their
// own, for -empty.
func (fr *findRun) markEmpty(ctx context.Context, entries []*fentry) error {
	var dirs []*fentry
	for _, e := range entries {
		if e.d.Type == store.TypeDir {
			dirs = append(dirs, e)
		}
	}
	for len(dirs) > 0 {
		batch := dirs[:min(len(dirs), inoBatch)]
		dirs = dirs[len(batch):]
		paths := make([]string, len(batch))
		for i, e := range batch {
			paths[i] = e.d.Path
		}
		plain, inFlight, err := fr.st.EntryCounts(ctx, paths)
		if err != nil {
			return err
		}
		for _, e := range batch {
			p := e.d.Path
			switch {
			case plain[p] > 0:
			case inFlight[p] == 0:
				e.empty = true
			default:
				// Entries that a rename in flight may hide: the view tells.
				empty, err := fr.listsNothing(ctx, p)
				if err != nil {
					return err
				}
				e.empty = empty
			}
		}
	}
	return nil
}

// listsNothing reports whether readers see no entries in dir.
func (fr *findRun) listsNothing(ctx context.Context, dir string) (bool, error) {
	pages := fr.view.List(dir, 100)
	defer pages.Close()
	for {
		page, _, err := pages.Next(ctx)
		if err != nil {
			return false, err
		}
		if page == nil {
			return true, nil
		}
		if len(page) > 0 {
			return false, nil
		}
	}
}

// pathLess orders paths as a walk visits them: directory by directory,
// each in its listing's order (store.CompareNames), a directory before what
// it holds, or after it with post (-depth).
func pathLess(a, b string, post bool) bool {
	i, j := 0, 0
	for {
		for i < len(a) && a[i] == '/' {
			i++
		}
		for j < len(b) && b[j] == '/' {
			j++
		}
		if i >= len(a) || j >= len(b) {
			if i >= len(a) && j >= len(b) {
				return false
			}
			return (i >= len(a)) != post
		}
		ei, ej := i, j
		for ei < len(a) && a[ei] != '/' {
			ei++
		}
		for ej < len(b) && b[ej] != '/' {
			ej++
		}
		if ca, cb := a[i:ei], b[j:ej]; ca != cb {
			return store.CompareNames(ca, cb) < 0
		}
		i, j = ei, ej
	}
}
