package mounttest

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Toxi is a toxiproxy TCP proxy in front of the cluster, run in-process:
// latency, resets, blackholes and outages as toxiproxy makes them for the
// many projects that test with it, with no server to install.
type Toxi struct {
	URL string
	p   *toxiproxy.Proxy
	n   atomic.Int64
}

// NewToxi starts a proxy to the cluster at esURL until the test ends.
func NewToxi(t testing.TB, esURL string) *Toxi {
	t.Helper()
	u, err := url.Parse(esURL)
	if err != nil {
		t.Fatal(err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "elasticsearch", "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	x := &Toxi{URL: "http://" + p.Listen, p: p}
	t.Cleanup(p.Stop)
	return x
}

// Add installs a toxic (toxiproxy's JSON: type, stream, attributes) and
// returns its name, for Remove.
func (x *Toxi) Add(t testing.TB, typ, stream string, attrs string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", typ, x.n.Add(1))
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("adding toxic %s: %v", js, err)
	}
	return name
}

// Remove takes a toxic away.
func (x *Toxi) Remove(t testing.TB, name string) {
	t.Helper()
	if err := x.p.Toxics.RemoveToxic(t.Context(), name); err != nil {
		t.Fatalf("removing toxic %s: %v", name, err)
	}
}

// Down stops the proxy: open connections are closed and new ones refused,
// as when the cluster goes away. Up starts it again on the same address.
func (x *Toxi) Down() { x.p.Stop() }

func (x *Toxi) Up(t testing.TB) {
	t.Helper()
	if err := x.p.Start(); err != nil {
		t.Fatalf("restarting the proxy on %s: %v", x.p.Listen, err)
	}
}
