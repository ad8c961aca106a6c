package roleserve

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerOwnertrust publishes the cluster's owner trust, by which node
// management judges the owner's certificates (rpc.Server.JudgeOwners):
// first the copy on the data partition (owner_trust.pb) or, on the boot
// that creates the cluster, the bootstrap owner key; then every trust the
// curator streams (Curator.WatchOwnerTrust), keeping the copy in step.
//
// The copy lets node management admit the owner when no curator answers,
// after a power cut of the whole cluster say, which is when the owner
// needs a node's logs most; it may then be stale by the changes made while
// the node was cut off. A node that has neither copy nor bootstrap key
// (committed, and cut off before it heard from a curator) publishes
// nothing, and node management refuses the owner until it has heard.
type workerOwnertrust struct {
	membership event.Watchable[*Membership]
	curator    event.Watchable[*curatorConn]
	// node is the data partition's node/ directory, which holds the copy.
	node *localstorage.NodeDirectory

	trust event.Value[*api.OwnerTrust]
	// cur is the trust last published, kept across restarts of run so
	// that the local copy is published once per boot.
	cur *api.OwnerTrust
}

func (w *workerOwnertrust) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	if w.cur == nil {
		t, err := w.initial(ctx, m)
		if err != nil {
			return err
		}
		if t != nil {
			w.publish(ctx, t)
		}
	}
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	stream, err := cc.client().WatchOwnerTrust(ctx, &api.WatchOwnerTrustRequest{})
	if err != nil {
		return fmt.Errorf("when watching the owner trust: %w", err)
	}
	healthy := false
	for {
		res, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("when watching the owner trust: %w", err)
		}
		t := res.GetTrust()
		if err := checkOwnerTrust(t); err != nil {
			return fmt.Errorf("the curator sent an unusable owner trust: %w", err)
		}
		if !proto.Equal(t, w.cur) {
			if err := writeOwnerTrust(w.node, t); err != nil {
				return err
			}
			w.publish(ctx, t)
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
}

// initial returns the trust the node starts with: the copy on the data
// partition, else the bootstrap owner key, else nil.
func (w *workerOwnertrust) initial(ctx context.Context, m *Membership) (*api.OwnerTrust, error) {
	b, err := w.node.OwnerTrust.Read()
	switch {
	case err == nil:
		t, err := parseOwnerTrust(b)
		if err == nil {
			return t, nil
		}
		supervisor.Logger(ctx).Warningf("Ignoring unreadable %s: %v", w.node.OwnerTrust.FullPath(), err)
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("when reading the owner trust copy: %w", err)
	}
	if m.Bootstrap != nil {
		return &api.OwnerTrust{OwnerPublicKey: m.Bootstrap.OwnerPublicKey}, nil
	}
	supervisor.Logger(ctx).Warning("No owner trust known yet: node management refuses the owner until a curator sends it")
	return nil, nil
}

// publish sets the owner trust and says so.
func (w *workerOwnertrust) publish(ctx context.Context, t *api.OwnerTrust) {
	w.trust.Set(t)
	w.cur = t
	supervisor.Logger(ctx).Infof("Owner trust: owner key %s, %d revoked certificate(s)", rpc.OwnerKeyFingerprint(t.OwnerPublicKey), len(t.Revoked))
}

// checkOwnerTrust refuses an owner trust that admits nobody, or whose
// revocations name no serial.
func checkOwnerTrust(t *api.OwnerTrust) error {
	if len(t.GetOwnerPublicKey()) != ed25519.PublicKeySize {
		return fmt.Errorf("owner key is %d bytes, want %d", len(t.GetOwnerPublicKey()), ed25519.PublicKeySize)
	}
	for _, r := range t.GetRevoked() {
		if len(r.GetSerial()) == 0 {
			return errors.New("a revocation names no serial")
		}
	}
	return nil
}

// parseOwnerTrust parses the content of owner_trust.pb, which comes from
// disk: a usable owner trust or an error.
func parseOwnerTrust(b []byte) (*api.OwnerTrust, error) {
	t := &api.OwnerTrust{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("when parsing the owner trust: %w", err)
	}
	if err := checkOwnerTrust(t); err != nil {
		return nil, err
	}
	return t, nil
}

// writeOwnerTrust replaces the copy of the owner trust, atomically and
// durably.
func writeOwnerTrust(files *localstorage.NodeDirectory, t *api.OwnerTrust) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
	if err != nil {
		return fmt.Errorf("when marshalling the owner trust: %w", err)
	}
	if err := files.MkdirAll(0o700); err != nil {
		return fmt.Errorf("when creating %s: %w", files.FullPath(), err)
	}
	if err := files.OwnerTrust.Write(b); err != nil {
		return fmt.Errorf("when writing the owner trust copy: %w", err)
	}
	return nil
}
