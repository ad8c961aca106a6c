package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/proto/api"
)

func newNodeMetricsCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "metrics ID",
		Short: "Print a node's metrics in the Prometheus text format",
		Long: "metrics asks the node itself (its management port) for its metrics: the\n" +
			"same that scrapers read on its metrics port, " + fmt.Sprint(ports.Metrics) + ", with a metrics\n" +
			"certificate (cairnctl metrics credential).",
		Args: exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			var res *api.GetMetricsResponse
			err := a.nodeManagement(ctx, o, id, "reading the metrics of node "+id, func(c api.NodeManagementClient) error {
				var err error
				res, err = c.GetMetrics(ctx, &api.GetMetricsRequest{})
				return err
			})
			if err != nil {
				return err
			}
			_, err = a.out.Write(res.GetText())
			return err
		}),
	}
}

func newMetricsCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metrics",
		Short: "Credentials for scrapers of the nodes' metrics",
	}
	var name, out string
	var lifetime time.Duration
	credential := &cobra.Command{
		Use:   "credential --name NAME --out DIR",
		Short: "Write a key and a metrics certificate for a scraper (Prometheus) into DIR",
		Long: "credential draws a key and has the cluster certify it for reading the\n" +
			"nodes' metrics, HTTPS on port " + fmt.Sprint(ports.Metrics) + ", path /metrics, and nothing else: the\n" +
			"holder has none of the owner's rights. It writes DIR/key.pem, DIR/cert.pem\n" +
			"and DIR/ca.pem (the cluster CA). The certificate cannot be revoked; it ends\n" +
			"with its lifetime (at most 90 days), so renew it in time. Each node's\n" +
			"certificate names the node's ID, not its address: set the scrape job's\n" +
			"tls_config server_name to the node ID.",
		Args: cobra.NoArgs,
		RunE: a.ownerRun(func(ctx context.Context, o *owner, _ []string) error {
			return a.metricsCredential(ctx, o, name, out, lifetime)
		}),
	}
	credential.Flags().StringVar(&name, "name", "prometheus", "the scraper's name (a-z, 0-9, '-' and '.')")
	credential.Flags().StringVar(&out, "out", "", "directory to write key.pem, cert.pem and ca.pem into (made if missing)")
	credential.Flags().DurationVar(&lifetime, "lifetime", 30*24*time.Hour, "how long the certificate lives, 1m to 2160h")
	credential.MarkFlagRequired("out")
	cmd.AddCommand(credential)
	return cmd
}

// metricsCredential draws a scraper's key, has it certified and writes
// both with the CA into dir.
func (a *app) metricsCredential(ctx context.Context, o *owner, name, dir string, lifetime time.Duration) error {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("when generating the scraper's key: %w", err)
	}
	var res *api.IssueMetricsCertificateResponse
	err = o.curator(ctx, "issuing a metrics certificate", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = api.NewManagementClient(conn).IssueMetricsCertificate(ctx, &api.IssueMetricsCertificateRequest{
			PublicKey: pub, Name: name, LifetimeSeconds: int64(lifetime / time.Second),
		})
		return err
	})
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("when encoding the scraper's key: %w", err)
	}
	cert, err := x509.ParseCertificate(res.GetCertificate())
	if err != nil {
		return fmt.Errorf("when parsing the metrics certificate: %w", err)
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
		mode      os.FileMode
	}{
		{"key.pem", "PRIVATE KEY", keyDER, 0o600},
		{"cert.pem", "CERTIFICATE", res.GetCertificate(), 0o644},
		{"ca.pem", "CERTIFICATE", res.GetCaCertificate(), 0o644},
	} {
		if err := writeFileAtomic(dir, f.name, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.out, "Metrics credential for %q in %s, valid until %s.\nScrape https://NODE:%d/metrics with tls_config ca_file, cert_file, key_file and server_name NODE-ID.\n",
		name, dir, cert.NotAfter.Local().Format(time.RFC3339), ports.Metrics)
	return nil
}
