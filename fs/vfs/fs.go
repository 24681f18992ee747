package vfs

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Options configure a mount.
type Options struct {
	ReadOnly        bool
	AllowOther      bool
	AttrTimeout     time.Duration // kernel attribute cache
	EntryTimeout    time.Duration // kernel name cache
	NegativeTimeout time.Duration // kernel cache of "no such name"
	CacheTTL        time.Duration // daemon cache (ristretto) entries
	CacheBytes      int64
	// LockTimeout is how long an operation may wait for locks; a request's
	// deadline leaves room for it, so that a lock wait ends in EAGAIN.
	LockTimeout time.Duration
	// DirtyLimit is how many bytes of written data a file may buffer before
	// they are sent to the store (they always are on flush, fsync and close).
	DirtyLimit int64
	// DataCache bounds the bytes of the chunks the mount keeps after
	// reading them, of open and closed files (clean.go); 0 is
	// DefaultDataCache, below 0 none but what open files read ahead.
	DataCache int64
	// NamesKept bounds the names delegations keep, known and told to the
	// kernel, summed over directories (deleg_shed.go); 0 is
	// DefaultNamesKept.
	NamesKept int
	Debug     bool
	Logger    *slog.Logger
	FsName    string
	// Metrics counts the write-behind batches; nil makes a private set.
	Metrics *Metrics
	// Delegations: hold read delegations on directories, and answer
	// lookups and listings of those from memory (see deleg.go).
	Delegations bool
	// WriteDelegations: directories made here are born write-delegated,
	// and what is made in them is flushed in batches (see writeback.go).
	// Needs Delegations.
	WriteDelegations bool
	// FlushInterval is how often the pending batch is flushed (default
	// DefaultFlushInterval).
	FlushInterval time.Duration
	// Root is the stored path of the directory mounted as the mount's
	// root, and RootIno its inode ("" and 0: the filesystem's root). A
	// node's path is its names below Root joined to Root, so everything
	// the daemon asks the store (and every lock it takes, on the stored
	// paths up to "/") is about stored paths, as on a mount of the whole
	// filesystem; the kernel keeps ".." at the mount's root inside it.
	Root    string
	RootIno uint64
}

// Mount is the state of one mount of a filesystem, and every operation
// on it, by inode and name: what it knows of each directory (delegations),
// what it holds in memory (open files, write-behind batches) and what it
// owes the store. It knows nothing of FUSE: the adapter (package fs)
// turns kernel requests into its calls.
type Mount struct {
	st      *store.Store
	co      *locking.Coordinator
	cache   *cache.Cache
	opts    Options
	log     *slog.Logger
	metrics *Metrics
	// delegs is nil when delegations are off, wb when write delegations
	// are.
	delegs *delegs
	wb     *writeback
	// errs: write-back errors, for every open file description to
	// report (errseq.go).
	errs errSeq
	// changing: this mount's entry changes under way, by directory.
	changing entryChanges
	// ahead: the reading ahead of walks (walkahead.go).
	ahead walkAhead

	// writes counts path-index writes of this mount and refreshed the value
	// of writes when the last refresh started: a listing refreshes first
	// only when this mount wrote since, which gives read-your-writes without
	// a refresh per operation.
	writes    atomic.Uint64
	refreshed atomic.Uint64
	refreshes refreshRounds // shared by the callers that ask at once

	// closed is set when the daemon stops serving a detached mount:
	// writes then fail instead of filling buffers nobody will flush.
	closed atomic.Bool

	mu lockorder.Mutex // protects the following
	// open holds the shared state of every inode with open handles in this
	// mount (data buffers, size), so that handles see each other's writes
	// and an unlinked file stays readable until its last close.
	open map[uint64]*openFile
	// clean: the chunks read, of open files and of closed ones.
	clean *cleanCache

	// usageLast is what statfs last read of the cluster's usage, at
	// usageAt: read again at most every usageTTL.
	usageMu   lockorder.Mutex
	usageAt   time.Time
	usageLast store.Usage
}

// New builds the filesystem over an opened store and the mount's side of
// the locking protocol.
func New(st *store.Store, co *locking.Coordinator, c *cache.Cache, o Options) *Mount {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DirtyLimit <= 0 {
		o.DirtyLimit = 32 << 20
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.DataCache == 0 {
		o.DataCache = DefaultDataCache
	}
	if o.NamesKept <= 0 {
		o.NamesKept = DefaultNamesKept
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Root == "" || o.RootIno == 0 {
		o.Root, o.RootIno = "/", store.RootIno
	}
	f := &Mount{st: st, co: co, cache: c, opts: o, log: o.Logger, metrics: o.Metrics, open: map[uint64]*openFile{},
		clean: newCleanCache(o.DataCache, o.Metrics.dataCache)}
	co.Journal.SetDropLink(f.dropReplacedLink)
	if o.Delegations {
		f.delegs = newDelegs(f)
		co.Delegations.Recall = f.delegs.recall
		if o.WriteDelegations {
			f.wb = newWriteback(f)
		}
	}
	return f
}

// CallContext is ctxOf for the adapter: the context a kernel request runs
// under.
func (f *Mount) CallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return f.ctxOf(ctx)
}

// Options are the mount's options, as New completed them.
func (f *Mount) Options() Options { return f.opts }

// ctxOf gives a kernel request its own deadline, a small multiple of the
// store's timeout, so that no operation can hang however the cluster
// behaves. It deliberately drops the kernel's cancellation: the Go runtime
// preempts threads with SIGURG, and a thread blocked in a FUSE call turns
// each one into an INTERRUPT, so honouring them would fail close() and
// friends at random. A request runs to its end or to its deadline.
func (f *Mount) ctxOf(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*f.st.Timeout()+f.opts.LockTimeout)
}

// noteWrite records a write to the path index (see writes).
func (f *Mount) noteWrite() { f.writes.Add(1) }

// refreshIfDirty makes this mount's own path writes visible to search.
func (f *Mount) refreshIfDirty(ctx context.Context) error {
	w := f.writes.Load()
	if f.refreshed.Load() >= w {
		return nil
	}
	return f.refreshNow(ctx) // shared with the callers meanwhile
}

// refreshBeside runs read while a refresh runs (refreshNow), and returns
// the refresh's error once both are done.
func (f *Mount) refreshBeside(ctx context.Context, read func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		read()
	}()
	err := f.refreshNow(ctx)
	<-done
	return err
}

// refreshNow makes every path write that completed before it was called,
// this mount's and others', visible to search. Callers share refreshes:
// one that comes while a refresh runs joins the next, which starts once
// that one ends and answers every caller that joined it (the listings of
// a walk read ahead in parallel, each after a grant of its own, would
// otherwise each ask for one).
func (f *Mount) refreshNow(ctx context.Context) error {
	r := &f.refreshes
	r.mu.Lock()
	if r.next == nil {
		r.next = &refreshRound{done: make(chan struct{})}
	}
	round := r.next
	if !r.running {
		r.running = true
		r.next = nil
		go f.refreshRounds(round)
	}
	r.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refreshRounds runs round, then the rounds joined meanwhile, until none.
func (f *Mount) refreshRounds(round *refreshRound) {
	r := &f.refreshes
	for round != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*f.st.Timeout())
		start := f.writes.Load()
		round.err = f.st.Refresh(ctx, store.SearchedPaths)
		cancel()
		if round.err == nil {
			f.refreshed.Store(max(start, f.refreshed.Load()))
		}
		close(round.done)
		r.mu.Lock()
		round, r.next = r.next, nil
		r.running = round != nil
		r.mu.Unlock()
	}
}

// refreshRounds are the refreshes of the path index callers share (see
// refreshNow).
type refreshRounds struct {
	mu      lockorder.Mutex
	running bool
	next    *refreshRound // joined, to start once the running one ends
}

type refreshRound struct {
	done chan struct{}
	err  error
}

// errnoErr lets inner functions return an errno through error values.
func errnoErr(e syscall.Errno, format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), e)
}

// end releases a transaction's locks; a failed release turns success into
// the release's error (a lost session means someone may have undone us).
func (f *Mount) end(ctx context.Context, txn *locking.Txn, err *error) {
	if rerr := txn.End(ctx); rerr != nil && *err == nil {
		*err = rerr
	}
}

func now() int64 { return time.Now().UnixNano() }

// attrLock is the change lock of the directory whose delegations may hold
// the attributes a change overwrites (store.Inode.HeldBy: a directory's
// own, a file's with one link the one its inode records), joining this
// mount's lease on it: taking it recalls other mounts' delegations there,
// and holding it keeps new ones from being granted until the write is
// done; a mount granted one afterwards reads the attributes anew. The
// directory is decided by what is stored (the inode the write replaces, at
// its version), never by where this mount found the file: another mount
// may have renamed it since, or linked it elsewhere and removed the name
// this mount knows. A rename moves the record with a compare-and-set
// (locking/journal_parents.go), so a change that read the inode before
// the move fails its compare-and-set, reads again, and recalls the new
// directory. One copy of the fact, in the store: this mount keeps none.
type attrLock struct {
	dir uint64
	end func()
}

// hold makes the lock held that of directory dir (0: none), releasing
// the one held before if it was another's.
func (l *attrLock) hold(ctx context.Context, f *Mount, dir uint64) error {
	if l.end != nil && l.dir == dir {
		return nil
	}
	l.release()
	if dir == 0 {
		return nil
	}
	h, err := f.co.Share(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		return err
	}
	l.dir, l.end = dir, h.End
	return nil
}

func (l *attrLock) release() {
	if l.end != nil {
		l.end()
		l.end = nil
	}
}

// usageTTL: how long statfs answers from the usage it read last. df and
// tools that check for space before each file call it often, and it
// costs a request to the cluster's stats.
const usageTTL = 5 * time.Second

// Usage returns the filesystem's usage (statfs), read at most every usageTTL.
func (f *Mount) Usage(ctx context.Context) (store.Usage, error) {
	f.usageMu.Lock()
	defer f.usageMu.Unlock()
	if time.Since(f.usageAt) > usageTTL {
		u, err := f.st.Usage(ctx)
		if err != nil {
			return store.Usage{}, err
		}
		f.usageLast, f.usageAt = u, time.Now()
	}
	return f.usageLast, nil
}

// NoteDamaged reports whether err is a damaged document's
// (store.DocError), which it logs once (store.Store.NoteDamaged).
func (f *Mount) NoteDamaged(op string, err error) bool { return f.st.NoteDamaged(op, err) }
