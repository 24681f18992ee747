package vfs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a mount makes in memory under write delegations,
// and the batches that flush it (see writeback.go), and what it keeps in
// memory of files and names (clean.go, deleg_shed.go).
type Metrics struct {
	pendingCreates prometheus.Counter
	pendingRemoves prometheus.Counter
	pendingRenames prometheus.Counter
	batchSize      prometheus.Histogram
	batchSeconds   prometheus.Histogram
	batches        *prometheus.CounterVec
	dataCache      prometheus.Gauge
	shedNames      prometheus.Counter
	namesKept      prometheus.Gauge
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

// NewMetrics makes the write-behind collectors and registers them with reg (nil:
// they count but nobody scrapes them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
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
	m.dataCache = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "esfs_data_cache_bytes",
		Help: "File contents the daemon keeps after reading them, of open and closed files (--data-cache-size bounds it, but for what open files read ahead).",
	})
	m.shedNames = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "esfs_delegation_names_shed_total",
		Help: "Names that delegations knew, or had told the kernel, forgotten to keep them under the mount's bound (the directories used least recently go first; their delegations stay).",
	})
	m.namesKept = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "esfs_delegation_names",
		Help: "Names that delegations keep, known or told to the kernel, summed over directories when last counted (every sixteenth of --names-kept new ones).",
	})
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "esfs_batches_total",
		Help: "Batch flushes of write delegations, by result (landed, failed: retried, or lost and logged).",
	}, []string{"result"})
	if reg != nil {
		reg.MustRegister(m.pendingCreates, m.pendingRemoves, m.pendingRenames, m.batchSize, m.batchSeconds, m.batches, m.dataCache, m.shedNames, m.namesKept)
	}
	return m
}
