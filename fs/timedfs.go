package fs

// The FUSE requests' metrics: a RawFileSystem that times each request
// into Metrics and bounds the kernel's cache of each reply.

import (
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// requestMetrics times every FUSE request the daemon answers, by opcode.
type requestMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	// byOp caches the histogram of each opcode: a request must not pay a
	// label lookup.
	byOp [opCount]prometheus.Observer
}

// newRequestMetrics makes the FUSE request collectors and registers them
// with reg (nil: they count but nobody scrapes them).
func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	m := &requestMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "esfs_fuse_request_duration_seconds",
			Help:    "FUSE requests answered by the daemon, by opcode (the kernel's own caches answer many more).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 20), // 50 µs .. 26 s
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "esfs_fuse_errors_total",
			Help: "FUSE requests answered with an error, by opcode and errno (ENOENT from LOOKUP is a normal miss).",
		}, []string{"op", "errno"}),
	}
	for i := range m.byOp {
		m.byOp[i] = m.duration.WithLabelValues(opNames[i])
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.errors)
	}
	return m
}

type opcode int

const (
	opLookup opcode = iota
	opGetAttr
	opSetAttr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opAccess
	opGetXAttr
	opListXAttr
	opSetXAttr
	opRemoveXAttr
	opCreate
	opOpen
	opRead
	opLseek
	opRelease
	opWrite
	opCopyFileRange
	opFlush
	opFsync
	opFallocate
	opOpenDir
	opReadDir
	opReadDirPlus
	opReleaseDir
	opFsyncDir
	opStatFs
	opStatx
	opGetLk
	opSetLk
	opSetLkw
	opCount
)

var opNames = [opCount]string{"LOOKUP", "GETATTR", "SETATTR", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME",
	"LINK", "SYMLINK", "READLINK", "ACCESS", "GETXATTR", "LISTXATTR", "SETXATTR", "REMOVEXATTR", "CREATE",
	"OPEN", "READ", "LSEEK", "RELEASE", "WRITE", "COPY_FILE_RANGE", "FLUSH", "FSYNC", "FALLOCATE", "OPENDIR",
	"READDIR", "READDIRPLUS", "RELEASEDIR", "FSYNCDIR", "STATFS", "STATX", "GETLK", "SETLK", "SETLKW"}

// since records one request; st points at the method's named result, so
// that a deferred call sees the final status.
func (m *requestMetrics) since(op opcode, start time.Time, st *fuse.Status) {
	m.byOp[op].Observe(time.Since(start).Seconds())
	if *st != fuse.OK {
		m.errors.WithLabelValues(opNames[op], errnoName(*st)).Inc()
	}
}

// errnoName is the symbolic name of a status ("ENOENT"), which is what a
// dashboard groups by.
func errnoName(st fuse.Status) string {
	if st > 0 {
		if n := unix.ErrnoName(syscall.Errno(st)); n != "" {
			return n
		}
	}
	return strconv.Itoa(int(st))
}

// timedFS is the node filesystem with every request timed. Methods it does
// not list (FORGET, INIT, locks, ioctl...) pass through untimed.
type timedFS struct {
	fuse.RawFileSystem
	m *requestMetrics
	// owners: the lock owner of each FLUSH under way, by its request's
	// cancel channel (see flushOwner).
	owners *sync.Map
	// keptAtMost bounds every timeout the kernel is given (FS.keptAtMost).
	keptAtMost func() (time.Duration, bool)
}

// boundEntry keeps the timeouts of out within keptAtMost.
func (t timedFS) boundEntry(out *fuse.EntryOut) {
	if t.keptAtMost == nil {
		return
	}
	if most, ok := t.keptAtMost(); ok {
		out.SetEntryTimeout(min(out.EntryTimeout(), most))
		out.SetAttrTimeout(min(out.AttrTimeout(), most))
	}
}

// boundAttr is boundEntry of an attribute answer (fuse.AttrOut,
// fuse.StatxOut).
func (t timedFS) boundAttr(out interface {
	Timeout() time.Duration
	SetTimeout(time.Duration)
}) {
	if t.keptAtMost == nil {
		return
	}
	if most, ok := t.keptAtMost(); ok {
		out.SetTimeout(min(out.Timeout(), most))
	}
}

func (t timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer t.m.since(opLookup, time.Now(), &st)
	defer unkeptEntry(out)
	defer t.boundEntry(out)
	return t.RawFileSystem.Lookup(c, h, name, out)
}
func (t timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer t.m.since(opGetAttr, time.Now(), &st)
	defer unkeptAttr(out)
	defer t.boundAttr(out)
	return t.RawFileSystem.GetAttr(c, in, out)
}
func (t timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer t.m.since(opSetAttr, time.Now(), &st)
	defer unkeptAttr(out)
	defer t.boundAttr(out)
	return t.RawFileSystem.SetAttr(c, in, out)
}
func (t timedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer t.m.since(opMknod, time.Now(), &st)
	defer unkeptEntry(out)
	defer t.boundEntry(out)
	return t.RawFileSystem.Mknod(c, in, name, out)
}
func (t timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer t.m.since(opMkdir, time.Now(), &st)
	defer unkeptEntry(out)
	defer t.boundEntry(out)
	return t.RawFileSystem.Mkdir(c, in, name, out)
}
func (t timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer t.m.since(opUnlink, time.Now(), &st)
	return t.RawFileSystem.Unlink(c, h, name)
}
func (t timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) (st fuse.Status) {
	defer t.m.since(opRmdir, time.Now(), &st)
	return t.RawFileSystem.Rmdir(c, h, name)
}
func (t timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) (st fuse.Status) {
	defer t.m.since(opRename, time.Now(), &st)
	return t.RawFileSystem.Rename(c, in, oldName, newName)
}
func (t timedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer t.m.since(opLink, time.Now(), &st)
	defer unkeptEntry(out)
	defer t.boundEntry(out)
	return t.RawFileSystem.Link(c, in, name, out)
}
func (t timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer t.m.since(opSymlink, time.Now(), &st)
	defer unkeptEntry(out)
	defer t.boundEntry(out)
	return t.RawFileSystem.Symlink(c, h, target, name, out)
}
func (t timedFS) Access(c <-chan struct{}, in *fuse.AccessIn) (st fuse.Status) {
	defer t.m.since(opAccess, time.Now(), &st)
	return t.RawFileSystem.Access(c, in)
}
func (t timedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) (st fuse.Status) {
	defer t.m.since(opSetXAttr, time.Now(), &st)
	return t.RawFileSystem.SetXAttr(c, in, attr, data)
}
func (t timedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) (st fuse.Status) {
	defer t.m.since(opRemoveXAttr, time.Now(), &st)
	return t.RawFileSystem.RemoveXAttr(c, h, attr)
}
func (t timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) (st fuse.Status) {
	defer t.m.since(opCreate, time.Now(), &st)
	defer unkeptEntry(&out.EntryOut)
	defer t.boundEntry(&out.EntryOut)
	return t.RawFileSystem.Create(c, in, name, out)
}
func (t timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer t.m.since(opOpen, time.Now(), &st)
	return t.RawFileSystem.Open(c, in, out)
}
func (t timedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) (st fuse.Status) {
	defer t.m.since(opLseek, time.Now(), &st)
	return t.RawFileSystem.Lseek(c, in, out)
}
func (t timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) (st fuse.Status) {
	defer t.m.since(opFlush, time.Now(), &st)
	if t.owners != nil {
		t.owners.Store(c, in.LockOwner)
		defer t.owners.Delete(c)
	}
	return t.RawFileSystem.Flush(c, in)
}
func (t timedFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) (st fuse.Status) {
	defer t.m.since(opGetLk, time.Now(), &st)
	return t.RawFileSystem.GetLk(c, in, out)
}
func (t timedFS) SetLk(c <-chan struct{}, in *fuse.LkIn) (st fuse.Status) {
	defer t.m.since(opSetLk, time.Now(), &st)
	return t.RawFileSystem.SetLk(c, in)
}
func (t timedFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) (st fuse.Status) {
	defer t.m.since(opSetLkw, time.Now(), &st)
	return t.RawFileSystem.SetLkw(c, in)
}
func (t timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer t.m.since(opFsync, time.Now(), &st)
	return t.RawFileSystem.Fsync(c, in)
}
func (t timedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) (st fuse.Status) {
	defer t.m.since(opFallocate, time.Now(), &st)
	return t.RawFileSystem.Fallocate(c, in)
}
func (t timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer t.m.since(opOpenDir, time.Now(), &st)
	return t.RawFileSystem.OpenDir(c, in, out)
}
func (t timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer t.m.since(opReadDir, time.Now(), &st)
	return t.RawFileSystem.ReadDir(c, in, out)
}
func (t timedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) (st fuse.Status) {
	defer t.m.since(opReadDirPlus, time.Now(), &st)
	return t.RawFileSystem.ReadDirPlus(c, in, out)
}
func (t timedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) (st fuse.Status) {
	defer t.m.since(opFsyncDir, time.Now(), &st)
	return t.RawFileSystem.FsyncDir(c, in)
}
func (t timedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) (st fuse.Status) {
	defer t.m.since(opStatFs, time.Now(), &st)
	return t.RawFileSystem.StatFs(c, h, out)
}
func (t timedFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) (st fuse.Status) {
	defer t.m.since(opStatx, time.Now(), &st)
	defer t.boundAttr(out)
	return t.RawFileSystem.Statx(c, in, out)
}
func (t timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) (target []byte, st fuse.Status) {
	defer t.m.since(opReadlink, time.Now(), &st)
	return t.RawFileSystem.Readlink(c, h)
}

func (t timedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (n uint32, st fuse.Status) {
	defer t.m.since(opGetXAttr, time.Now(), &st)
	return t.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (t timedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (n uint32, st fuse.Status) {
	defer t.m.since(opListXAttr, time.Now(), &st)
	return t.RawFileSystem.ListXAttr(c, h, dest)
}

func (t timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (r fuse.ReadResult, st fuse.Status) {
	defer t.m.since(opRead, time.Now(), &st)
	return t.RawFileSystem.Read(c, in, buf)
}

func (t timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (n uint32, st fuse.Status) {
	defer t.m.since(opWrite, time.Now(), &st)
	return t.RawFileSystem.Write(c, in, data)
}

func (t timedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (n uint32, st fuse.Status) {
	defer t.m.since(opWrite, time.Now(), &st)
	return t.RawFileSystem.Writev(c, in, data)
}

func (t timedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (n uint32, st fuse.Status) {
	defer t.m.since(opCopyFileRange, time.Now(), &st)
	return t.RawFileSystem.CopyFileRange(c, in)
}

func (t timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer t.m.since(opRelease, time.Now(), new(fuse.Status))
	t.RawFileSystem.Release(c, in)
}

func (t timedFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer t.m.since(opReleaseDir, time.Now(), new(fuse.Status))
	t.RawFileSystem.ReleaseDir(in)
}
