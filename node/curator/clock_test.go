package curator

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestNoCertificatesWhileClockWrong: while the curator's node says its
// clock is known wrong, IssueCertificate is refused with a reason, and
// once the clock is right again it issues.
func TestNoCertificatesWhileClockWrong(t *testing.T) {
	var clock memory.Value[timesync.State]
	clock.Set(timesync.State{Sync: timesync.Synchronized})
	c := newTestCluster(t, WithClock(timesync.NewClock(&clock)))
	clock.Set(timesync.State{Sync: timesync.KnownWrong, Reason: "an NTP server found it 2h off and stepping it failed"})
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	me := c.nodes[0].client(t, addr)
	req := &api.IssueCertificateRequest{Kind: api.CertificateKind_CERTIFICATE_KIND_NODE}

	_, err := me.IssueCertificate(ctx, req)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "known wrong") {
		t.Errorf("IssueCertificate with the clock known wrong = %v, want FailedPrecondition saying known wrong", err)
	}
	clock.Set(timesync.State{Sync: timesync.Synchronized})
	if _, err := me.IssueCertificate(ctx, req); err != nil {
		t.Errorf("IssueCertificate with the clock synchronized: %v", err)
	}
}
