package mounttest

// Reading a mount's Prometheus endpoint in the tests.

import (
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// FreeAddr returns a loopback address nobody listens on (now).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeClient bounds each scrape, as Prometheus does: a suite run once
// waited 33 minutes on a keep-alive connection whose answer never came
// (TestMetrics; the endpoint answered a new connection at once).
var scrapeClient = &http.Client{Timeout: 20 * time.Second}

// Scrape reads a Prometheus endpoint the way Prometheus does, trying
// again (on a new connection) when a try gets no answer.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	var res *http.Response
	var err error
	for try := 0; try < 3; try++ {
		if res, err = scrapeClient.Get(url); err == nil {
			break
		}
		scrapeClient.CloseIdleConnections()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// Sample is the value of the series of family name whose labels include
// want (a counter, gauge, or a histogram's count).
func Sample(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	total, found := 0.0, false
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			ok := false
			for _, l := range m.GetLabel() {
				ok = ok || (l.GetName() == want[i] && l.GetValue() == want[i+1])
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if !found {
		return -1
	}
	return total
}
