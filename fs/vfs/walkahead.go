package vfs

// Walking ahead: a tool that walks a tree (find, du, ls -R, rsync) lists a
// directory, then descends into its subdirectories one after the other.
// Each first listing waits for a few round trips (the delegation, a
// refresh, the scan, the attributes of its entries: see Listing.start),
// one directory at a time. Once a walk shows itself (a listing of a
// directory whose parent this mount listed to its end a moment ago), the
// parent's other subdirectories are listed in the background, a few at a
// time, each under a read delegation granted for it, into the state of
// that delegation (names, their attributes, the directory's own): when the
// walk reaches one, its listing and the stats of its entries are answered
// from memory.
//
// What is read ahead is what a listing under the delegation would read,
// by the same code (a Listing), so it is exactly as current: a change by
// another mount recalls the delegation and drops it, a change by this
// mount is counted against it (dirState.changed). It never recalls
// anybody: a directory whose delegation is refused is left to the walk.
// A foreground listing of a directory being read ahead waits for that
// read (bounded by its context) rather than doing it twice.
//
// A directory whose files are looked up by name one after the other (git
// status stats the files its index names) is read ahead the same way
// after a few lookups its delegation could not answer (see missed).

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

const (
	// aheadSubdirs bounds the subdirectories one listing records for
	// walking ahead.
	aheadSubdirs = 256
	// aheadListed bounds the listings whose subdirectories are kept for
	// a walk that may come (the least recent go first).
	aheadListed = 64
	// aheadFlight is how many directories are read ahead at once,
	// mount-wide: enough to keep a cluster busy while the walk goes on.
	aheadFlight = 4
	// aheadQueued bounds the directories waiting to be read ahead.
	aheadQueued = 1024
	// aheadWithin is how soon after its parent's listing a descent shows
	// a walk.
	aheadWithin = 30 * time.Second
	// aheadMisses is the number of lookups of names a directory's
	// delegation did not know after which the directory is read ahead.
	aheadMisses = 4
	// aheadEntries bounds the entries read ahead of one directory: the
	// first ones of a larger directory are known (and answer lookups),
	// the directory is not known complete.
	aheadEntries = 10000
)

// listedSubdirs are the subdirectories of a directory listed to its end.
type listedSubdirs struct {
	subs []store.Dentry
	at   time.Time
	st   *dirState // the delegation listed under, if any
}

// aheadDir is a directory to read ahead, and the state of its parent's
// delegation it was listed under (Listing.vouch).
type aheadDir struct {
	e     store.Dentry
	vouch *dirState
}

// walkAhead is the mount's reading ahead of walks.
type walkAhead struct {
	mu lockorder.Mutex
	// listed: the subdirectories of the directories listed to their
	// end lately, by path; order: those paths, oldest first.
	listed map[string]listedSubdirs
	order  []string
	// queue: directories to read ahead; reading: those being read, with
	// the channel closed when done.
	queue   []aheadDir
	reading map[uint64]chan struct{}
	workers int
	// nReading is len(reading), read without mu: lookups, which ask
	// whether their directory is being read, take no lock when none is.
	nReading atomic.Int64
}

// listedAll records the subdirectories of directory path, just listed to
// its end in the foreground.
func (w *walkAhead) listedAll(path string, subs []store.Dentry, st *dirState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.listed == nil {
		w.listed = map[string]listedSubdirs{}
	}
	if _, ok := w.listed[path]; !ok {
		w.order = append(w.order, path)
	}
	w.listed[path] = listedSubdirs{subs, time.Now(), st}
	for len(w.order) > aheadListed {
		delete(w.listed, w.order[0])
		w.order = w.order[1:]
	}
}

// descend is told of a foreground listing of directory path starting: if
// its parent was listed to its end lately, a walk is under way, and the
// parent's other subdirectories are queued to be read ahead (once).
func (f *Mount) descend(path string) {
	if f.delegs == nil || path == "/" {
		return
	}
	w := &f.ahead
	parent, _ := store.Split(path)
	w.mu.Lock()
	ls, ok := w.listed[parent]
	if ok {
		delete(w.listed, parent)
		w.order = slices.DeleteFunc(w.order, func(p string) bool { return p == parent })
	}
	if time.Since(ls.at) > aheadWithin {
		ls.subs = nil
	}
	var dirs []aheadDir
	for _, e := range ls.subs {
		if e.Path != path {
			dirs = append(dirs, aheadDir{e, ls.st})
		}
	}
	w.mu.Unlock()
	f.queueAhead(dirs)
}

// missed is told of a lookup in a directory whose delegation (st) did not
// know the name, which exists: a tool that stats the files of a directory
// by name (git status, after its index) would pay a lookup of each in real
// time. At the aheadMisses-th, the directory is read ahead whole, and the
// lookups after it are answered from memory.
func (f *Mount) missed(st *dirState, dir string) {
	if st.misses.Add(1) != aheadMisses {
		return
	}
	f.queueAhead([]aheadDir{{e: store.Dentry{Path: dir, Ino: st.ino, Type: store.TypeDir}}})
}

// queueAhead queues dirs to be read ahead, and starts readers for them.
func (f *Mount) queueAhead(dirs []aheadDir) {
	w := &f.ahead
	w.mu.Lock()
	for _, a := range dirs {
		if len(w.queue) >= aheadQueued || w.reading[a.e.Ino] != nil {
			continue
		}
		w.queue = append(w.queue, a)
	}
	start := min(aheadFlight-w.workers, len(w.queue))
	w.workers += max(start, 0)
	w.mu.Unlock()
	for range start {
		go f.readAheadLoop()
	}
}

// readAheadLoop reads the queued directories ahead until none is left.
func (f *Mount) readAheadLoop() {
	w := &f.ahead
	for {
		w.mu.Lock()
		if len(w.queue) == 0 || f.closed.Load() {
			w.queue = nil
			w.workers--
			w.mu.Unlock()
			return
		}
		a := w.queue[0]
		w.queue = w.queue[1:]
		e := a.e
		if w.reading == nil {
			w.reading = map[uint64]chan struct{}{}
		}
		done := make(chan struct{})
		w.reading[e.Ino] = done
		w.nReading.Add(1)
		w.mu.Unlock()
		f.readAhead(e, a.vouch)
		w.mu.Lock()
		delete(w.reading, e.Ino)
		w.nReading.Add(-1)
		w.mu.Unlock()
		close(done)
	}
}

// readAhead lists directory e (an entry as its parent's listing returned
// it, under the delegation state vouch if not nil) into the state of a
// read delegation on it, with its entries' attributes and its own.
func (f *Mount) readAhead(e store.Dentry, vouch *dirState) {
	if st := f.delegs.state(e.Ino); st != nil && st.isComplete() {
		return // known already
	}
	// Counted as what a call set off and did not wait for.
	ctx, cancel := context.WithTimeout(store.AfterCall(context.Background()), 2*f.st.Timeout())
	defer cancel()
	l := &Listing{f: f, dir: pathDir{e.Path, e.Ino}, path: e.Path, ahead: true, vouch: vouch}
	defer l.Close()
	for read := 0; read < aheadEntries; {
		page, err := l.Next(ctx)
		if err != nil || page == nil {
			break
		}
		if err := l.readInodes(ctx); err != nil {
			return
		}
		read += len(page)
	}
	st := l.st
	if st == nil || l.ownRead {
		return
	}
	changes := st.changeCount()
	if a, err := f.st.GetInode(ctx, e.Ino); err == nil {
		st.learnSelf(a, changes)
	}
}

// awaitAhead waits for the reading ahead of directory ino if one is under
// way, within ctx and the reading's own bound.
func (f *Mount) awaitAhead(ctx context.Context, ino uint64) {
	w := &f.ahead
	if w.nReading.Load() == 0 {
		return
	}
	w.mu.Lock()
	done := w.reading[ino]
	w.mu.Unlock()
	if done == nil {
		return
	}
	bound := time.NewTimer(2 * f.st.Timeout())
	defer bound.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-bound.C:
	}
}
