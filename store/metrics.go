package store

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the store's requests to Elasticsearch. Every request goes
// through Store.do, so one place sees them all. Each is counted under its
// origin: "upkeep" for the mount's own background work (the heartbeat,
// the sweeper and its observer, the lock mender, the recall polls, the
// write-back timer: whatever runs under a context marked by Upkeep),
// "after" for what a call left to the background once answered (the
// finish of a file's rename: AfterCall), "call" for everything else,
// which some call waits for: a FUSE call or a command, or another
// mount's call that recalled this one (ForCall). What a call costs is
// then read off the metrics without the work a mount does meanwhile on
// its own, and how much of it the call waited for.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	items    *prometheus.CounterVec
}

// NewMetrics makes the store's collectors and registers them with reg (nil:
// they count but nobody scrapes them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "esfs_es_request_duration_seconds",
			Help:    "Requests to Elasticsearch by endpoint, index (path, inode, data, lock, session; empty for requests to several indices or the cluster) and origin (call: made for a FUSE call or a command, which waits for it; after: set off by one that did not wait, such as a rename's finish; upkeep: the mount's own background work), including failed ones.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}, []string{"endpoint", "index", "origin"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "esfs_es_errors_total",
			Help: "Failed requests to Elasticsearch by endpoint and kind: unreachable (no answer, timeout), 4xx or 5xx (HTTP status of the whole request; item conflicts inside a bulk are not errors).",
		}, []string{"endpoint", "kind", "origin"}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "esfs_es_bulk_items_total",
			Help: "Documents written (or deleted) through _bulk, by index: path, inode, data, lock (locks and operation records), session.",
		}, []string{"index"}),
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.errors, m.items)
	}
	return m
}

// originKey holds who the requests under a context are made for.
type originKey struct{}

// Upkeep returns ctx marked as the mount's own background work: every
// request made under it is counted with origin "upkeep". Every
// background loop marks the contexts it makes (see Metrics).
func Upkeep(ctx context.Context) context.Context {
	return context.WithValue(ctx, originKey{}, "upkeep")
}

// ForCall returns ctx marked as work for a call again, under a
// background loop's context: the answer to a recall is made for another
// mount's call, which waits for it.
func ForCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, originKey{}, "call")
}

// AfterCall returns a call's ctx, without its cancellation, marked as
// work the call set off and did not wait for (origin "after").
func AfterCall(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), originKey{}, "after")
}

// origin names who a request under ctx is made for (see Metrics).
func origin(ctx context.Context) string {
	if o, _ := ctx.Value(originKey{}).(string); o != "" {
		return o
	}
	return "call"
}

// observe records one request to index (a role name, or "") at path, made
// for origin. status 0 means no answer.
func (m *Metrics) observe(path, index, origin string, took time.Duration, status int) {
	ep := endpoint(path)
	m.duration.WithLabelValues(ep, index, origin).Observe(took.Seconds())
	switch {
	case status == 0:
		m.errors.WithLabelValues(ep, "unreachable", origin).Inc()
	case status >= 500:
		m.errors.WithLabelValues(ep, "5xx", origin).Inc()
	case status >= 400 && status != 404 && status != 409:
		// 404 and 409 are answers the protocol expects (absent document,
		// lost compare-and-set), not failures.
		m.errors.WithLabelValues(ep, "4xx", origin).Inc()
	}
}

// endpoint names a request by its API, not by its document, so that the
// label set stays small: "_bulk", "_mget", "_search", "_doc", "_create",
// "_pit", "_refresh", "_mapping", ... and "index" for index-level calls.
func endpoint(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	ep := "index"
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "_") {
			ep = seg
			break
		}
	}
	if ep == "_search" && strings.Contains(path, "/_search/scroll") {
		return "_scroll"
	}
	return ep
}

// roleName names the index a request path starts with by its role.
func (i indices) roleName(path string) string {
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if first == "" || strings.ContainsAny(first, ",*") {
		return ""
	}
	if first, err := url.PathUnescape(first); err == nil {
		for r, role := range [...]string{pathsIndex: "path", inodesIndex: "inode", dataIndex: "data", locksIndex: "lock", sessionsIndex: "session"} {
			if r != 0 && (i.name(indexRole(r)) == first || i.alias(indexRole(r)) == first) {
				return role
			}
		}
	}
	return ""
}

// countItems counts the documents of one bulk request by index role.
func (m *Metrics) countItems(ops []BulkOp) {
	var n [sessionsIndex + 1]int
	for _, o := range ops {
		n[o.index]++
	}
	for r, role := range [...]string{pathsIndex: "path", inodesIndex: "inode", dataIndex: "data", locksIndex: "lock", sessionsIndex: "session"} {
		if n[r] > 0 {
			m.items.WithLabelValues(role).Add(float64(n[r]))
		}
	}
}
