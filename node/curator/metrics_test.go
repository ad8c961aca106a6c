package curator

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

func TestIssueMetricsCertificate(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	mgmt := c.mgmt(t, c.nodes[0].addr.String())
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mgmt.IssueMetricsCertificate(ctx, &api.IssueMetricsCertificateRequest{PublicKey: pub, Name: "prometheus", LifetimeSeconds: 3600})
	if err != nil {
		t.Fatalf("IssueMetricsCertificate: %v", err)
	}
	// A metrics certificate of the cluster CA, for the key and name.
	if _, err := identity.MetricsClientTLSConfig(key, res.Certificate, res.CaCertificate); err != nil {
		t.Errorf("the certificate is no metrics certificate of the cluster CA: %v", err)
	}
	cert, err := x509.ParseCertificate(res.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); cert.Subject.CommonName != "prometheus" || life < time.Hour || life > time.Hour+5*time.Minute {
		t.Errorf("certificate for %q living %v, want prometheus for about an hour", cert.Subject.CommonName, life)
	}
	res, err = mgmt.IssueMetricsCertificate(ctx, &api.IssueMetricsCertificateRequest{PublicKey: pub, Name: "prometheus"})
	if err != nil {
		t.Fatalf("IssueMetricsCertificate with the default lifetime: %v", err)
	}
	if cert, err = x509.ParseCertificate(res.Certificate); err != nil || cert.NotAfter.Sub(cert.NotBefore) < DefaultMetricsCertificateLifetime {
		t.Errorf("default lifetime: %v, %v; want %v", cert.NotAfter.Sub(cert.NotBefore), err, DefaultMetricsCertificateLifetime)
	}
	for _, req := range []*api.IssueMetricsCertificateRequest{
		{PublicKey: pub[:31], Name: "prometheus"},
		{PublicKey: pub},
		{PublicKey: pub, Name: "Prometheus"},
		{PublicKey: pub, Name: "a/b"},
		{PublicKey: pub, Name: "prometheus", LifetimeSeconds: 59},
		{PublicKey: pub, Name: "prometheus", LifetimeSeconds: -1},
		{PublicKey: pub, Name: "prometheus", LifetimeSeconds: int64(MaxMetricsCertificateLifetime/time.Second) + 1},
	} {
		if _, err := mgmt.IssueMetricsCertificate(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("IssueMetricsCertificate(%v) = %v, want InvalidArgument", req, err)
		}
	}
}

// TestLeaderMetrics checks the election metrics of a one-curator cluster:
// it leads, and saw one leader take over.
func TestLeaderMetrics(t *testing.T) {
	c := newTestCluster(t)
	n := c.nodes[0]
	if got := waitLeader(t, n, n.addr.String(), ""); got != n.id() {
		t.Fatalf("leader %s, want %s", got, n.id())
	}
	fixture.Eventually(t, 10*time.Second, "cairn_curator_leading 1", func() error {
		if v := testutil.ToFloat64(leadingGauge); v != 1 {
			return fmt.Errorf("cairn_curator_leading = %v", v)
		}
		return nil
	})
	if v := testutil.ToFloat64(leaderChanges); v < 1 {
		t.Errorf("cairn_curator_leader_changes_total = %v, want at least the one take-over", v)
	}
}
