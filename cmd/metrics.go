package cmd

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	runtimepprof "runtime/pprof"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// newRegistry is the mount's private registry: esfs's own collectors plus
// the Go runtime's and the process's (RSS, open files, CPU), and the
// build's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b := thisBuild()
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "esfs_build_info",
		Help:        "Always 1; its labels say which esfs this is: its version, the commit it was built from (+dirty if changed), the Go that built it.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// serveMetrics listens on addr (host:port) and serves /metrics for
// Prometheus, and with profiles /debug/pprof/ for profiling. It fails at
// once if the address cannot be had, so that the mount does not start
// half-observable. Never the command line (pprof's cmdline): nothing
// secret is in it (credentials.go), but whoever reaches the address need
// not read how the mount was started either.
func serveMetrics(addr string, profiles bool, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	index := "esfs: /metrics (Prometheus); Go profiles with --pprof"
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprofIndex)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		index = "esfs: /metrics (Prometheus), /debug/pprof/ (Go profiles)"
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, index)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// pprofIndex lists the profiles served, and serves each by name as
// pprof.Index does. pprof's own list names cmdline, which is not served.
func pprofIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/debug/pprof/" {
		pprof.Index(w, r) // a runtime profile by name; others are 404
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var names []string
	for _, p := range runtimepprof.Profiles() {
		names = append(names, p.Name())
	}
	names = append(names, "profile", "symbol", "trace")
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "/debug/pprof/%s\n", n)
	}
}

// statsOf sums the registry into the few figures a mount publishes with its
// heartbeat for `esfs status` (see statusLines for their meaning).
func statsOf(reg prometheus.Gatherer) map[string]float64 {
	fams, err := reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "esfs_fuse_request_duration_seconds":
				out["fuse_requests"] += float64(m.GetHistogram().GetSampleCount())
				out["fuse_seconds"] += m.GetHistogram().GetSampleSum()
			case "esfs_fuse_errors_total":
				if e := label(m, "errno"); e == "ENOENT" || e == "ENODATA" {
					continue // a missing name or attribute: an answer, not a failure
				}
				out["fuse_errors"] += m.GetCounter().GetValue()
			case "esfs_es_request_duration_seconds":
				out["es_requests"] += float64(m.GetHistogram().GetSampleCount())
				out["es_seconds"] += m.GetHistogram().GetSampleSum()
			case "esfs_es_errors_total":
				out["es_errors"] += m.GetCounter().GetValue()
			case "esfs_cache_hits_total":
				out["cache_hits"] += m.GetCounter().GetValue()
			case "esfs_cache_misses_total":
				out["cache_misses"] += m.GetCounter().GetValue()
			case "esfs_locks_held":
				out["locks_held"] += m.GetGauge().GetValue()
			case "esfs_lock_acquire_seconds":
				out["lock_acquires"] += float64(m.GetHistogram().GetSampleCount())
				out["lock_wait_seconds"] += m.GetHistogram().GetSampleSum()
				if label(m, "result") == "timeout" {
					out["lock_timeouts"] += float64(m.GetHistogram().GetSampleCount())
				}
			case "esfs_renames_in_flight":
				out["renames_in_flight"] += m.GetGauge().GetValue()
			case "esfs_renames_total":
				out["renames"] += m.GetCounter().GetValue()
			case "esfs_rename_documents_total":
				out["rename_documents"] += m.GetCounter().GetValue()
			case "esfs_delegations_held":
				out["delegations_"+label(m, "mode")] += m.GetGauge().GetValue()
			case "esfs_recalls_sent_total":
				out["recalls_sent"] += m.GetCounter().GetValue()
			case "esfs_recall_answer_seconds":
				out["recalls_answered"] += float64(m.GetHistogram().GetSampleCount())
				out["recall_answer_seconds"] += m.GetHistogram().GetSampleSum()
			case "esfs_batches_total":
				out["batches_"+label(m, "result")] += m.GetCounter().GetValue()
			case "esfs_batch_entries":
				out["batch_entries"] += m.GetHistogram().GetSampleSum()
			case "esfs_batch_flush_seconds":
				out["batch_seconds"] += m.GetHistogram().GetSampleSum()
			case "process_resident_memory_bytes":
				out["rss_bytes"] += m.GetGauge().GetValue()
			}
		}
	}
	for k, v := range out {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(out, k) // JSON has no NaN
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// statusLines says a mount's published figures in words.
func statusLines(s map[string]float64) []string {
	if len(s) == 0 {
		return nil
	}
	avg := func(sum, n float64) string {
		if n == 0 {
			return "-"
		}
		return (time.Duration(sum / n * float64(time.Second))).Round(time.Microsecond).String()
	}
	pct := func(a, b float64) string {
		if a+b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*a/(a+b))
	}
	lines := []string{
		fmt.Sprintf("FUSE requests %.0f (mean %s), errors %.0f (not counting missing names and attributes)",
			s["fuse_requests"], avg(s["fuse_seconds"], s["fuse_requests"]), s["fuse_errors"]),
		fmt.Sprintf("Elasticsearch requests %.0f (mean %s), failed %.0f",
			s["es_requests"], avg(s["es_seconds"], s["es_requests"]), s["es_errors"]),
		fmt.Sprintf("metadata cache hits %.0f, misses %.0f (hit rate %s)",
			s["cache_hits"], s["cache_misses"], pct(s["cache_hits"], s["cache_misses"])),
		fmt.Sprintf("locks held %.0f; %.0f acquisitions (mean %s), %.0f timed out",
			s["locks_held"], s["lock_acquires"], avg(s["lock_wait_seconds"], s["lock_acquires"]), s["lock_timeouts"]),
		fmt.Sprintf("renames %.0f, in flight %.0f, path documents moved %.0f",
			s["renames"], s["renames_in_flight"], s["rename_documents"]),
		fmt.Sprintf("delegations held %.0f (read %.0f, write %.0f); recalls sent %.0f, answered %.0f (mean %s)",
			s["delegations_read"]+s["delegations_write"], s["delegations_read"], s["delegations_write"],
			s["recalls_sent"], s["recalls_answered"], avg(s["recall_answer_seconds"], s["recalls_answered"])),
	}
	if n := s["batches_landed"] + s["batches_failed"]; n > 0 {
		lines = append(lines, fmt.Sprintf("write batches landed %.0f (%.0f entries, mean %s), failed %.0f",
			s["batches_landed"], s["batch_entries"], avg(s["batch_seconds"], s["batches_landed"]), s["batches_failed"]))
	}
	if rss := s["rss_bytes"]; rss > 0 {
		lines = append(lines, fmt.Sprintf("daemon memory (RSS) %.0f MiB", rss/(1<<20)))
	}
	return lines
}
