package locking

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics watches the protocol from one mount: locks held, how long
// acquiring them took, renames in flight and the path documents they moved.
type Metrics struct {
	held      prometheus.Gauge
	wait      *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	renamed   prometheus.Counter
	renames   *prometheus.CounterVec
	recovered prometheus.Counter
}

// NewMetrics makes the protocol's collectors and registers them with reg
// (nil: they count but nobody scrapes them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "esfs_locks_held",
			Help: "Lock entries this mount holds now (one per lock document an operation holds)."}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "esfs_lock_acquire_seconds",
			Help:    "Time to acquire an operation's locks, waiting included; result is granted, timeout or error.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "esfs_renames_in_flight",
			Help: "Renames of this mount between their record and their end, including ones kept for retry."}),
		renamed: prometheus.NewCounter(prometheus.CounterOpts{Name: "esfs_rename_documents_total",
			Help: "Paths moved by this mount's renames (a directory counts with everything below it; each move writes the old and the new document twice: staged, then finished)."}),
		renames: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "esfs_renames_total",
			Help: "Journaled renames of this mount by outcome: done, failed (rolled back or refused), kept (finished later by the sweeper)."}, []string{"result"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Name: "esfs_recoveries_total",
			Help: "Operations of dead mounts this mount took over and finished or undid."}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.wait, m.inFlight, m.renamed, m.renames, m.recovered)
	}
	return m
}

func (m *Metrics) acquired(start time.Time, n int, err error) {
	result := "granted"
	switch {
	case err == nil:
		m.held.Add(float64(n))
	case errors.Is(err, ErrLocked):
		result = "timeout"
	default:
		result = "error"
	}
	m.wait.WithLabelValues(result).Observe(time.Since(start).Seconds())
}
