package roleserve

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// waitOwnerKey waits until n's role server publishes an owner trust for
// key, and returns when.
func waitOwnerKey(t *testing.T, n *testNode, key ed25519.PublicKey, timeout time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := event.Get(ctx, n.svc.OwnerTrust(), event.Filter(func(t *api.OwnerTrust) bool {
		return t != nil && bytes.Equal(t.OwnerPublicKey, key)
	})); err != nil {
		t.Fatalf("%s: no owner trust for key %s within %v: %v", n.id(), rpc.OwnerKeyFingerprint(key), timeout, err)
	}
	return time.Now()
}

// rotate rotates the owner key from o's to next over conn, an owner
// connection of o.
func rotate(ctx context.Context, t *testing.T, conn *grpc.ClientConn, o *owner, next ed25519.PrivateKey) {
	t.Helper()
	stream, err := api.NewManagementClient(conn).RotateOwnerKey(ctx)
	if err != nil {
		t.Fatalf("RotateOwnerKey: %v", err)
	}
	cs, ok := rpc.TLSConnectionState(stream.Context())
	if !ok {
		t.Fatal("rotation stream has no TLS state")
	}
	nextPub := next.Public().(ed25519.PublicKey)
	payload, err := rpc.OwnerRotationProofPayload(o.key.Public().(ed25519.PublicKey), nextPub, cs)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&api.RotateOwnerKeyRequest{NewOwnerPublicKey: nextPub, Proof: ed25519.Sign(next, payload)})
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatalf("RotateOwnerKey: %v", err)
	}
}

// TestOwnerTrust runs a bootstrap node A and a node B: A publishes the
// bootstrap owner key before its curator runs, B learns it from the
// curator, and once the owner key is rotated both publish the new one
// within one stream message (the time is logged), B keeping a copy on its
// data partition.
func TestOwnerTrust(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and a curator; skipped under -short")
	}
	ctx := fixture.Context(t)
	o := &owner{key: identitytest.NewKey(t)}
	ownerPub := o.key.Public().(ed25519.PublicKey)

	a := newTestNode(t, fixture.FreePort(t), fixture.FreePort(t), fixture.FreePort(t), 0)
	a.membership.Set(&Membership{
		NodeKey:      a.key,
		Bootstrap:    o.bootstrap(a),
		InitialRoles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
	})
	a.start(t)
	// From the bootstrap data, before its curator runs.
	waitOwnerKey(t, a, ownerPub, 10*time.Second)
	a.waitMarker(t, marker.CuratorServing, 2*time.Minute, "addr", a.curatorAddr())
	mgmt := o.dial(t, a.curatorAddr())

	b := newTestNode(t, fixture.FreePort(t), fixture.FreePort(t), fixture.FreePort(t), a.cfg.Ports.Curator)
	bCreds := enrol(t, o, mgmt, a, b)
	b.membership.Set(&Membership{
		NodeKey:     b.key,
		Credentials: bCreds,
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id: a.id(), Addresses: []*api.ClusterDirectory_Node_Address{{Host: a.ip.String()}},
		}}},
	})
	b.start(t)
	waitOwnerKey(t, b, ownerPub, time.Minute)

	next := identitytest.NewKey(t)
	nextPub := next.Public().(ed25519.PublicKey)
	start := time.Now()
	rotate(ctx, t, mgmt, o, next)
	for _, n := range []*testNode{a, b} {
		t.Logf("%s published the new owner key %v after RotateOwnerKey was sent", n.id(), waitOwnerKey(t, n, nextPub, 10*time.Second).Sub(start))
	}
	fixture.Eventually(t, 10*time.Second, "the new owner key in B's owner_trust.pb", func() error {
		data, err := b.cfg.Storage.Root.Data.Node.OwnerTrust.Read()
		if err != nil {
			return err
		}
		kept, err := parseOwnerTrust(data)
		if err != nil {
			return err
		}
		if !bytes.Equal(kept.OwnerPublicKey, nextPub) {
			return fmt.Errorf("owner_trust.pb holds key %s", rpc.OwnerKeyFingerprint(kept.OwnerPublicKey))
		}
		return nil
	})
}

// FuzzParseOwnerTrust feeds parseOwnerTrust what a damaged or tampered
// owner_trust.pb might hold: it must return a usable trust or an error,
// never panic, and a trust it accepts must survive being written back.
func FuzzParseOwnerTrust(f *testing.F) {
	key := bytes.Repeat([]byte{1}, ed25519.PublicKeySize)
	for _, t := range []*api.OwnerTrust{
		{OwnerPublicKey: key},
		{OwnerPublicKey: key, Revoked: []*api.RevokedOwnerCertificate{{Serial: []byte{7}, NotAfterUnixNanos: 1}}},
		{OwnerPublicKey: key[:3]},
	} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a})
	f.Add([]byte("not a protobuf message at all"))
	f.Fuzz(func(t *testing.T, b []byte) {
		trust, err := parseOwnerTrust(b)
		if err != nil {
			if trust != nil {
				t.Errorf("parseOwnerTrust(%x) = %v, %v: a trust with an error", b, trust, err)
			}
			return
		}
		if len(trust.OwnerPublicKey) != ed25519.PublicKeySize {
			t.Errorf("parseOwnerTrust(%x) accepted a %d-byte owner key", b, len(trust.OwnerPublicKey))
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(trust)
		if err != nil {
			t.Fatalf("marshalling a trust parsed from %x: %v", b, err)
		}
		back, err := parseOwnerTrust(again)
		if err != nil || !proto.Equal(trust, back) {
			t.Errorf("trust parsed from %x changed when written back: %v, then %v, %v", b, trust, back, err)
		}
	})
}
