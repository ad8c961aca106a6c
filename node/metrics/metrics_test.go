package metrics

import (
	"crypto/ed25519"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// TestHandlerServesOnlyMetricsCertificates scrapes the handler over real
// TLS with each kind of client the cluster has: only a metrics
// certificate reads the metrics.
func TestHandlerServesOnlyMetricsCertificates(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	node := ca.Node(t)
	restarts := NewRestarts()
	restarts.Inc("root.roleserve.kubeworker")
	// Not httptest's TLS server: it would present a certificate of its
	// own instead of the node's.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(node, Gatherer("/proc", restarts)), TLSConfig: node.ServerTLSConfig(), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(lis, "", "")
	defer srv.Close()
	url := "https://" + lis.Addr().String() + "/metrics"

	metricsKey := identitytest.NewKey(t)
	metricsTLS, err := identity.MetricsClientTLSConfig(metricsKey, ca.Issue(t, identity.MetricsCertificateTemplate("prometheus"), metricsKey.Public().(ed25519.PublicKey)), ca.DER())
	if err != nil {
		t.Fatal(err)
	}
	ownerKey, ownerDER := ca.Owner(t)
	ownerTLS, err := identity.OwnerClientTLSConfig(ownerKey, ownerDER, ca.DER())
	if err != nil {
		t.Fatal(err)
	}
	anonymousTLS, err := identity.EphemeralClientTLSConfig(ca.DER(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		tls    *tls.Config
		status int
		want   []string
	}{
		{"metrics", metricsTLS, http.StatusOK, []string{
			"cairn_node_memory_total_bytes ",
			"cairn_node_memory_available_bytes ",
			`cairn_node_cpu_seconds_total{mode="busy"} `,
			`cairn_node_cpu_seconds_total{mode="idle"} `,
			"cairn_process_resident_bytes{",
			`cairn_supervisor_restarts_total{dn="root.roleserve.kubeworker"} 1`,
			"go_goroutines ",
		}},
		{"owner", ownerTLS, http.StatusForbidden, []string{"a certificate of kind owner"}},
		{"node", ca.Node(t).ClientTLSConfig(), http.StatusForbidden, []string{"a certificate of kind node"}},
		{"no certificate", anonymousTLS, http.StatusForbidden, []string{"a certificate of kind anonymous"}},
	} {
		// The clients verify the server's node certificate by its ID,
		// not by the address dialled.
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.tls}}
		res, err := client.Get(url)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: %s: %s", c.name, res.Status, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(body), w) {
				t.Errorf("%s: the answer lacks %q:\n%.2000s", c.name, w, body)
			}
		}
	}
}

func TestText(t *testing.T) {
	text, err := Text(Gatherer("/proc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"# TYPE cairn_node_memory_total_bytes gauge", "# TYPE cairn_process_cpu_seconds_total counter", "go_goroutines "} {
		if !strings.Contains(string(text), w) {
			t.Errorf("Text lacks %q", w)
		}
	}
}
