// Package fs is the FUSE face of esfs: it turns kernel requests into store
// reads and writes through the cache. It is the only package that imports
// go-fuse, and the only place where errors become errno (toErrno).
//
// Paths and inodes: the kernel addresses inodes, the store addresses paths.
// A node learns its path from go-fuse's tree (parent + name, updated by
// rename), and everything that does not need a path — attributes, data,
// xattrs — is addressed by inode number, which a rename never changes. So an
// open file keeps working whatever happens to its name, here or on another
// mount.
//
// The daemon must never access its own mount point (it would deadlock on
// itself); nothing here does.
package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/hanwen/go-fuse/v2/fuse"
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
	Debug      bool
	Logger     *slog.Logger
	FsName     string
	// Metrics times FUSE requests; nil makes a private set.
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

// FS is one mounted filesystem.
type FS struct {
	// dirNodes: the kernel node of each directory the kernel knows, by
	// inode (see node.dropOldName).
	dirNodes sync.Map
	st       *store.Store
	co       *locking.Coordinator
	cache    *cache.Cache
	opts     Options
	log      *slog.Logger
	metrics  *Metrics
	// delegs is nil when delegations are off, wb when write delegations
	// are.
	delegs *delegs
	wb     *writeback
	// errs: write-back errors, for every open file description to
	// report (errseq.go).
	errs errSeq
	// flushOwners: the lock owner of each FLUSH under way (filelock.go).
	flushOwners sync.Map
	// changing: this mount's entry changes under way, by directory.
	changing entryChanges

	// writes counts path-index writes of this mount and refreshed the value
	// of writes when the last refresh started: a listing refreshes first
	// only when this mount wrote since, which gives read-your-writes without
	// a refresh per operation.
	writes    atomic.Uint64
	refreshed atomic.Uint64
	refreshMu sync.Mutex // one refresh at a time; waiters reuse its result

	// closed is set when the daemon stops serving a detached mount:
	// writes then fail instead of filling buffers nobody will flush.
	closed atomic.Bool

	mu sync.Mutex // protects the following
	// open holds the shared state of every inode with open handles in this
	// mount (data buffers, size), so that handles see each other's writes
	// and an unlinked file stays readable until its last close.
	open map[uint64]*openFile

	statfsMu   sync.Mutex
	statfsAt   time.Time
	statfsLast fuse.StatfsOut
}

// New builds the filesystem over an opened store and the mount's side of
// the locking protocol.
func New(st *store.Store, co *locking.Coordinator, c *cache.Cache, o Options) *FS {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DirtyLimit <= 0 {
		o.DirtyLimit = 32 << 20
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Root == "" || o.RootIno == 0 {
		o.Root, o.RootIno = "/", store.RootIno
	}
	f := &FS{st: st, co: co, cache: c, opts: o, log: o.Logger, metrics: o.Metrics, open: map[uint64]*openFile{}}
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

// ctxOf gives a kernel request its own deadline, a small multiple of the
// store's timeout, so that no operation can hang however the cluster
// behaves. It deliberately drops the kernel's cancellation: the Go runtime
// preempts threads with SIGURG, and a thread blocked in a FUSE call turns
// each one into an INTERRUPT, so honouring them would fail close() and
// friends at random. A request runs to its end or to its deadline.
func (f *FS) ctxOf(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*f.st.Timeout()+f.opts.LockTimeout)
}

// noteWrite records a write to the path index (see writes).
func (f *FS) noteWrite() { f.writes.Add(1) }

// refreshIfDirty makes this mount's own path writes visible to search.
func (f *FS) refreshIfDirty(ctx context.Context) error {
	w := f.writes.Load()
	if f.refreshed.Load() >= w {
		return nil
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	if f.refreshed.Load() >= w {
		return nil // someone refreshed after our writes while we waited
	}
	return f.refreshNow(ctx)
}

// refreshNow makes every path write that completed before it was called,
// this mount's and others', visible to search.
func (f *FS) refreshNow(ctx context.Context) error {
	start := f.writes.Load()
	if err := f.st.Refresh(ctx, store.SearchedPaths); err != nil {
		return err
	}
	f.refreshed.Store(start)
	return nil
}

// toErrno is the one place where errors become errno. Unknown errors are
// logged and become EIO.
func (f *FS) toErrno(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, store.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, store.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, locking.ErrLocked):
		f.log.Warn("lock wait timed out", "op", op, "err", err)
		return syscall.EAGAIN
	case errors.Is(err, locking.ErrLeaseLost), errors.Is(err, locking.ErrAborted):
		f.log.Error("operation fenced: this mount lost its session", "op", op, "err", err)
		return syscall.EIO
	case errors.Is(err, store.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, store.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrUnavailable):
		f.log.Warn("store unavailable", "op", op, "err", err)
		return syscall.EIO
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, store.ErrCorrupt):
		f.log.Error("corrupt document", "op", op, "err", err)
		return syscall.EIO
	}
	f.log.Error("operation failed", "op", op, "err", err)
	return syscall.EIO
}

// errnoErr lets inner functions return an errno through error values.
func errnoErr(e syscall.Errno, format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), e)
}

// resolve returns the node at path: from the cache, or with realtime GETs.
func (f *FS) resolve(ctx context.Context, path string) (store.Node, error) {
	if n, neg, ok := f.cache.Lookup(path); ok {
		if neg {
			return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
		}
		return n, nil
	}
	return f.resolveFresh(ctx, path)
}

// resolveFresh reads path from the store, bypassing the cache, and caches it.
// The inode may come from the cache, except with delegations (see
// resolveNow).
func (f *FS) resolveFresh(ctx context.Context, path string) (store.Node, error) {
	return f.resolveRead(ctx, path, f.delegs != nil)
}

// resolveRead reads path from the store, and its inode too if now (else
// from the cache if there), and caches them.
func (f *FS) resolveRead(ctx context.Context, path string, now bool) (store.Node, error) {
	gen := f.cache.Gen()
	e, err := f.co.View.Get(ctx, path)
	if err != nil {
		return store.Node{}, err
	}
	return f.resolveEntry(ctx, path, e, now, gen)
}

// resolveWatching is resolveFresh of path in directory dirIno (at dir),
// reading in the same round trip whether another mount writes the
// directory (holds its write delegation). If one does, it recalls it
// and reports recalled, without an answer: the caller asks again, once
// the writer has flushed.
func (f *FS) resolveWatching(ctx context.Context, dirIno uint64, dir, path string) (sn store.Node, recalled bool, err error) {
	gen := f.cache.Gen()
	d, derr, lk, err := f.st.GetDentryWithLock(ctx, path, store.DelegLockID(dirIno))
	if err != nil {
		return store.Node{}, false, err
	}
	if lk.WrittenElsewhere(f.co.Session().ID()) {
		return store.Node{}, true, f.co.Delegations.RecallWriter(ctx, dirIno, dir)
	}
	var e locking.Entry
	switch {
	case errors.Is(derr, store.ErrNotFound):
	case derr != nil:
		return store.Node{}, false, derr
	default:
		vis, ok, err := f.co.View.Resolve(ctx, d)
		if err != nil {
			return store.Node{}, false, err
		}
		e = locking.Entry{Dentry: vis, Found: ok, Stored: true}
	}
	sn, err = f.resolveEntry(ctx, path, e, true, gen)
	return sn, false, err
}

// resolveLive is resolveWatching until it has an answer: path as it is
// stored now, a mount writing its directory in memory recalled first.
func (f *FS) resolveLive(ctx context.Context, dirIno uint64, dir, path string) (store.Node, error) {
	for {
		sn, recalled, err := f.resolveWatching(ctx, dirIno, dir, path)
		if !recalled || err != nil {
			return sn, err
		}
	}
}

// resolveReadOnly is resolve for the lookups of a read-only mount without
// delegations: a name found may come from the cache, a name missing is
// read now (as resolveLive). The kernel decides mkdir, mknod, symlink,
// link and open(O_CREAT|O_EXCL) on a read-only mount by this lookup alone
// (it asks again, past its own cache, for exactly this), where a writable
// mount's create asks the store: a missing name this mount remembers,
// made since by another mount, would be answered EROFS instead of EEXIST.
func (f *FS) resolveReadOnly(ctx context.Context, dirIno uint64, dir, path string) (store.Node, error) {
	if n, neg, ok := f.cache.Lookup(path); ok && !neg {
		return n, nil
	}
	return f.resolveLive(ctx, dirIno, dir, path)
}

// resolveEntry is resolveRead once the path document is read (e), gen the
// cache generation read before.
func (f *FS) resolveEntry(ctx context.Context, path string, e locking.Entry, now bool, gen uint64) (store.Node, error) {
	var err error
	if !e.Found {
		f.cache.PutNegative(path, gen)
		return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
	}
	d := e.Dentry
	var attr store.Inode
	if now {
		attr, err = f.inodeNow(ctx, d.Ino, d.Type, path)
	} else {
		attr, err = f.inode(ctx, d.Ino, gen)
	}
	for attempt := 0; errors.Is(err, store.ErrNotFound); attempt++ {
		// Either another mount removed the entry between our two reads
		// (then it is simply gone), or a create is landing (its bulk
		// writes the path and the inode on different shards, so the path
		// can be read a moment before its inode), or a path points at a
		// missing inode (a create that failed halfway, or damage; fsck
		// removes it): only what persists is damage.
		again, aerr := f.st.GetDentry(ctx, path)
		if errors.Is(aerr, store.ErrNotFound) {
			f.cache.PutNegative(path, gen)
			return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
		}
		if aerr == nil && again.Ino != d.Ino {
			return f.resolveRead(ctx, path, now) // replaced meanwhile
		}
		if attempt >= 6 {
			return store.Node{}, fmt.Errorf("path %q points at missing inode %d: %w", path, d.Ino, store.ErrCorrupt)
		}
		store.Backoff(ctx, attempt, 50*time.Millisecond)
		if attr, err = f.st.GetInode(ctx, d.Ino); err == nil {
			f.cache.PutInode(attr, gen)
		}
	}
	if err != nil {
		return store.Node{}, err
	}
	if attr.Type != d.Type {
		return store.Node{}, fmt.Errorf("path %q is a %s but inode %d is a %s: %w", path, d.Type, d.Ino, attr.Type, store.ErrCorrupt)
	}
	n := store.Node{Dentry: d, Attr: attr}
	f.cache.PutNode(n, gen)
	return n, nil
}

// end releases a transaction's locks; a failed release turns success into
// the release's error (a lost session means someone may have undone us).
func (f *FS) end(ctx context.Context, txn *locking.Txn, err *error) {
	if rerr := txn.End(ctx); rerr != nil && *err == nil {
		*err = rerr
	}
}

// inode returns the attributes of ino, from the cache or the store. gen is
// the cache generation read before the caller's first store read.
func (f *FS) inode(ctx context.Context, ino uint64, gen uint64) (store.Inode, error) {
	if a, ok := f.wb.inode(ino); ok {
		return a, nil
	}
	if n, ok := f.cache.Inode(ino); ok {
		return n, nil
	}
	n, err := f.st.GetInode(ctx, ino)
	if err != nil {
		return store.Inode{}, err
	}
	f.cache.PutInode(n, gen)
	return n, nil
}

// freshInode reads the attributes of ino from the store, bypassing the cache.
func (f *FS) freshInode(ctx context.Context, ino uint64) (store.Inode, error) {
	if a, ok := f.wb.inode(ino); ok {
		return a, nil // pending: this mount's memory is where it lives
	}
	gen := f.cache.Gen()
	n, err := f.st.GetInode(ctx, ino)
	if err != nil {
		return store.Inode{}, err
	}
	f.cache.PutInode(n, gen)
	return n, nil
}

// watched returns whether a real-time read of directory ino must come
// with its delegation document: with delegations, unless a delegation of
// this mount covers it (then no other mount writes it) or it is this
// mount's own, not flushed yet.
func (f *FS) watched(ino uint64) bool {
	if f.delegs == nil || f.delegs.state(ino) != nil {
		return false
	}
	_, pending := f.wb.inode(ino)
	return !pending
}

// inodesNow reads the attributes of inos in real time, and caches them.
// Those of a directory in dirs (its path by inode, see watched) come with
// its delegation document in the same round trip: a directory another
// mount writes in memory changes its link count and times with what that
// mount makes there, so that mount is recalled (it flushes first) and
// the attributes are read again.
func (f *FS) inodesNow(ctx context.Context, inos []uint64, dirs map[uint64]string) ([]store.InodeResult, error) {
	gen := f.cache.Gen()
	watch := make([]uint64, 0, len(dirs))
	ids := make([]string, 0, len(dirs))
	for ino := range dirs {
		watch, ids = append(watch, ino), append(ids, store.DelegLockID(ino))
	}
	res, locks, err := f.st.GetInodesWithLocks(ctx, inos, ids)
	if err != nil {
		return nil, err
	}
	recalled := false
	for i, lk := range locks {
		if lk.WrittenElsewhere(f.co.Session().ID()) {
			if err := f.co.Delegations.RecallWriter(ctx, watch[i], dirs[watch[i]]); err != nil {
				return nil, err
			}
			recalled = true
		}
	}
	if recalled {
		gen = f.cache.Gen()
		if res, err = f.st.GetInodes(ctx, inos); err != nil {
			return nil, err
		}
	}
	for _, r := range res {
		if r.Err == nil {
			f.cache.PutInode(r.Inode, gen)
		}
	}
	return res, nil
}

// inodeNow is freshInode of ino, a file or a directory (typ) at path: a
// directory's read comes with its delegation document (inodesNow).
func (f *FS) inodeNow(ctx context.Context, ino uint64, typ store.FileType, path string) (store.Inode, error) {
	if typ != store.TypeDir || !f.watched(ino) {
		return f.freshInode(ctx, ino)
	}
	res, err := f.inodesNow(ctx, []uint64{ino}, map[uint64]string{ino: path})
	if err != nil {
		return store.Inode{}, err
	}
	return res[0].Inode, res[0].Err
}

// updateInode applies change to the attributes of ino with compare-and-set,
// re-reading and re-applying on conflict: concurrent setattrs, writes and
// link count changes from any mount all serialize on the inode document.
func (f *FS) updateInode(ctx context.Context, ino uint64, change func(*store.Inode) error) (store.Inode, error) {
	if n, ok := f.cache.Inode(ino); ok {
		return f.updateInodeFrom(ctx, ino, &n, change)
	}
	return f.updateInodeFrom(ctx, ino, nil, change)
}

// updateInodeFrom is updateInode whose first attempt starts from known (if
// not nil), a copy of the inode as this mount last read or wrote it,
// instead of reading it: one round trip instead of two while nobody else
// changed it, and the usual re-read if someone did.
func (f *FS) updateInodeFrom(ctx context.Context, ino uint64, known *store.Inode, change func(*store.Inode) error) (store.Inode, error) {
	for {
		a, ok, err := f.wb.update(ino, change)
		if !ok {
			break
		}
		if errors.Is(err, errOutcomeUnknown) {
			if err := f.settle(ctx); err != nil {
				return store.Inode{}, err
			}
			continue
		}
		if err == nil {
			f.delegs.updateAttr(ino, a)
		}
		return a, err
	}
	// Anything pending lands first: this change may depend on it.
	if err := f.settle(ctx); err != nil {
		return store.Inode{}, err
	}
	var lock attrLock
	defer lock.release()
	f.delegs.forgetAttr(ino)
	for attempt := 0; ; attempt++ {
		var n store.Inode
		remembered := attempt == 0 && known != nil && known.Ino == ino && known.Ver.Known()
		if remembered {
			n = *known
			n.Xattrs = maps.Clone(known.Xattrs) // change must not write through to known
		} else {
			var err error
			if n, err = f.freshInode(ctx, ino); err != nil {
				return store.Inode{}, err
			}
		}
		// Which delegations may hold what is overwritten, from the
		// inode as this write replaces it (see attrLock).
		holder := n.HeldBy()
		if err := change(&n); err != nil {
			if remembered {
				// Refused on what this mount remembers, which may be
				// stale (another mount chowned it): decide on a fresh read.
				continue
			}
			return store.Inode{}, err
		}
		if err := lock.hold(ctx, f, holder); err != nil {
			return store.Inode{}, err
		}
		f.cache.InvalidateInode(ino)
		v, err := f.st.Write(ctx, store.PutInode(n, n.Ver))
		if errors.Is(err, store.ErrConflict) && attempt < 50 {
			if !remembered {
				store.Backoff(ctx, attempt, store.InodeBackoff)
			}
			continue
		}
		if err != nil {
			return store.Inode{}, err
		}
		n.Ver = v
		f.cache.PutInode(n, f.cache.Gen())
		f.delegs.forgetAttr(ino) // a lookup may have learned it meanwhile
		return n, nil
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
func (l *attrLock) hold(ctx context.Context, f *FS, dir uint64) error {
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
