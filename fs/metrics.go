package fs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics times every FUSE request the daemon answers, by opcode.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	// byOp caches the histogram of each opcode: a request must not pay a
	// label lookup.
	byOp [opCount]prometheus.Observer
	// Write delegations' batches (see writeback.go).
	pendingCreates prometheus.Counter
	pendingRemoves prometheus.Counter
	pendingRenames prometheus.Counter
	batchSize      prometheus.Histogram
	batchSeconds   prometheus.Histogram
	batches        *prometheus.CounterVec
}

// batch records one flush of a pending batch of n entries.
func (m *Metrics) batch(n int, took time.Duration, err error) {
	result := "landed"
	if err != nil {
		result = "failed"
	}
	m.batches.WithLabelValues(result).Inc()
	if err == nil {
		m.batchSize.Observe(float64(n))
		m.batchSeconds.Observe(took.Seconds())
	}
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

// NewMetrics makes the FUSE collectors and registers them with reg (nil:
// they count but nobody scrapes them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
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
	m.pendingCreates = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "esfs_pending_creates_total",
		Help: "Entries made in memory under a write delegation, to be flushed in a batch.",
	})
	m.pendingRemoves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "esfs_pending_removes_total",
		Help: "Stored entries removed in memory under a write delegation (unlink, rmdir), to be flushed in a batch.",
	})
	m.pendingRenames = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "esfs_pending_renames_total",
		Help: "Renames of stored files made in memory under write delegations, to be flushed in a batch.",
	})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "esfs_batch_entries",
		Help:    "Entries per flushed batch of a write delegation.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 .. 8192
	})
	m.batchSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "esfs_batch_flush_seconds",
		Help:    "Time to flush one batch (five round trips to Elasticsearch).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "esfs_batches_total",
		Help: "Batch flushes of write delegations, by result (landed, failed: retried, or lost and logged).",
	}, []string{"result"})
	for i := range m.byOp {
		m.byOp[i] = m.duration.WithLabelValues(opNames[i])
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.errors, m.pendingCreates, m.pendingRemoves, m.pendingRenames, m.batchSize, m.batchSeconds, m.batches)
	}
	return m
}
