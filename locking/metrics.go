package locking

import (
	"errors"
	"time"

	"github.com/esfs/esfs/store"
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

	delegs       *prometheus.GaugeVec
	grants       *prometheus.CounterVec
	recallsSent  prometheus.Counter
	recallAnswer prometheus.Histogram
	nudges       *prometheus.CounterVec
}

// NewMetrics makes the protocol's collectors and registers them with reg
// (nil: they count but nobody scrapes them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "esfs_locks_held",
			Help: "Lock entries operations of this mount hold now (one per lock document; delegations are counted in esfs_delegations_held)."}),
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
		delegs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "esfs_delegations_held",
			Help: "Directory delegations this mount holds now, by mode (read, write)."}, []string{"mode"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "esfs_delegation_grants_total",
			Help: "Delegation requests by mode and result: granted, refused (another mount conflicts), cooling (recalled too often lately), error."}, []string{"mode", "result"}),
		recallsSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "esfs_recalls_sent_total",
			Help: "Recalls this mount sent to another mount's delegation (one per holder; repeated while it waits)."}),
		recallAnswer: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "esfs_recall_answer_seconds",
			Help:    "Time this mount took to give a delegation back once it read the recall: its flush, dropping its caches and the release.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		nudges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "esfs_nudges_total",
			Help: "Nudges (datagrams that make another mount look at once at what it polls) by kind (recall, wake) and result: sent, failed (could not be sent: no route), received, refused (a wrong token or malformed)."}, []string{"kind", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.wait, m.inFlight, m.renamed, m.renames, m.recovered,
			m.delegs, m.grants, m.recallsSent, m.recallAnswer, m.nudges)
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

func delegModeName(mode store.LockMode) string {
	if mode == store.Exclusive {
		return "write"
	}
	return "read"
}

func (m *Metrics) granted(mode store.LockMode, err error) {
	result := "granted"
	switch {
	case err == nil:
	case errors.Is(err, ErrCooling):
		result = "cooling"
	case errors.Is(err, ErrLocked):
		result = "refused"
	default:
		result = "error"
	}
	m.grants.WithLabelValues(delegModeName(mode), result).Inc()
}

func (m *Metrics) delegHeld(mode store.LockMode, delta float64) {
	m.delegs.WithLabelValues(delegModeName(mode)).Add(delta)
}

func (m *Metrics) recallAnswered(d time.Duration) { m.recallAnswer.Observe(d.Seconds()) }

func (m *Metrics) recallSent(n int) { m.recallsSent.Add(float64(n)) }
