package roleserve

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// renewCallTimeout bounds one IssueCertificate call.
const renewCallTimeout = 30 * time.Second

// workerRenew renews the node certificate through the curator once half of
// its lifetime has passed, and keeps the new one on the data partition. The
// node's TLS configurations present the current certificate at each
// handshake (identity.Node.Renew), so nothing restarts. A failed renewal
// ends the worker with an error; the supervisor runs it again after a
// backoff, and the half of the lifetime that is left leaves time for many
// retries.
type workerRenew struct {
	credentials event.Watchable[*identity.Node]
	curator     event.Watchable[*curatorConn]
	node        *localstorage.NodeDirectory

	// now is the clock; tests replace it.
	now func() time.Time
}

func (w *workerRenew) run(ctx context.Context) error {
	node, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	log := supervisor.Logger(ctx)
	for {
		cert := node.Certificate()
		due := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
		if wait := due.Sub(w.now()); wait > 0 {
			log.Infof("Node certificate valid until %s; renewing it from %s", stamp(cert.NotAfter), stamp(due))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		der, err := w.issue(ctx)
		if err != nil {
			return err
		}
		if bytes.Equal(der, cert.Raw) {
			// The curator's clock says the certificate is not half used
			// yet: ask again a little later, not in a loop.
			log.Warningf("The curator handed back the current certificate; asking again in a minute (clocks apart?)")
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Minute):
			}
			continue
		}
		if err := node.Renew(der); err != nil {
			return fmt.Errorf("when taking the renewed certificate: %w", err)
		}
		b, err := node.MarshalPEM()
		if err != nil {
			return fmt.Errorf("when marshalling the renewed identity: %w", err)
		}
		if err := w.node.Identity.Write(b); err != nil {
			// The renewed certificate serves until the next reboot,
			// which gets a fresh one from JoinNode if need be.
			log.Warningf("Renewed the node certificate but cannot keep it: %v", err)
		}
		log.Infof("Renewed the node certificate, valid until %s", stamp(node.Certificate().NotAfter))
	}
}

// issue asks the curator leader for a fresh node certificate.
func (w *workerRenew) issue(ctx context.Context) ([]byte, error) {
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, renewCallTimeout)
	defer cancel()
	res, err := cc.client().IssueCertificate(cctx, &api.IssueCertificateRequest{Kind: api.CertificateKind_CERTIFICATE_KIND_NODE})
	if err != nil {
		return nil, fmt.Errorf("when asking the curator to renew the node certificate: %w", err)
	}
	return res.GetCertificate(), nil
}

// stamp formats t for log lines.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
