package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

// Lifetimes of metrics certificates (IssueMetricsCertificate): they cannot
// be revoked, so they are bounded.
const (
	DefaultMetricsCertificateLifetime = 30 * 24 * time.Hour
	MinMetricsCertificateLifetime     = time.Minute
	MaxMetricsCertificateLifetime     = 90 * 24 * time.Hour
)

func (m management) IssueMetricsCertificate(ctx context.Context, req *api.IssueMetricsCertificateRequest) (*api.IssueMetricsCertificateResponse, error) {
	if len(req.GetPublicKey()) != ed25519.PublicKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "public key is %d bytes, want an ed25519 key of %d", len(req.GetPublicKey()), ed25519.PublicKeySize)
	}
	if err := checkScraperName(req.GetName()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	lifetime := time.Duration(req.GetLifetimeSeconds()) * time.Second
	switch {
	case req.GetLifetimeSeconds() == 0:
		lifetime = DefaultMetricsCertificateLifetime
	case req.GetLifetimeSeconds() < 0 || lifetime < MinMetricsCertificateLifetime || lifetime > MaxMetricsCertificateLifetime:
		return nil, status.Errorf(codes.InvalidArgument, "lifetime of %d s: want %v to %v", req.GetLifetimeSeconds(), MinMetricsCertificateLifetime, MaxMetricsCertificateLifetime)
	}
	if err := m.checkClock(); err != nil {
		return nil, err
	}
	cert, err := m.ca.Sign(ctx, m.root, identity.MetricsCertificateTemplate(req.GetName()), ed25519.PublicKey(req.GetPublicKey()), lifetime)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "when signing the metrics certificate: %v", err)
	}
	ca, err := m.ca.Ensure(ctx, m.root)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "when loading the cluster CA: %v", err)
	}
	return &api.IssueMetricsCertificateResponse{Certificate: cert, CaCertificate: ca}, nil
}

// checkScraperName accepts 1 to 64 of a-z, 0-9, '-' and '.'.
func checkScraperName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("scraper name %q: want 1 to 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("scraper name %q: %q is not one of a-z, 0-9, '-' and '.'", name, r)
		}
	}
	return nil
}
