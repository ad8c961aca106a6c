package roleserve

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// TestRenewal runs a cluster whose curator issues node certificates for a
// few seconds only: node B renews its certificate through the curator
// before it expires, keeps the renewed one on its data partition, and,
// after its first certificate expired, still makes new connections to the
// curator, with no restart of its role server.
func TestRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and a curator for about half a minute; skipped under -short")
	}
	ctx := fixture.Context(t)
	o := &owner{key: identitytest.NewKey(t)}
	const lifetime = 8 * time.Second

	a := newTestNode(t, fixture.FreePort(t), fixture.FreePort(t), fixture.FreePort(t), 0)
	a.cfg.curatorOptions = append(a.cfg.curatorOptions, curator.WithCertificateLifetimes(lifetime, 0))
	a.membership.Set(&Membership{
		NodeKey:      a.key,
		Bootstrap:    o.bootstrap(a),
		InitialRoles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
	})
	a.start(t)
	a.waitMarker(t, marker.CuratorServing, 2*time.Minute, "addr", a.curatorAddr())
	mgmt := o.dial(t, a.curatorAddr())

	b := newTestNode(t, fixture.FreePort(t), fixture.FreePort(t), fixture.FreePort(t), a.cfg.Ports.Curator)
	bCreds := enrol(t, o, mgmt, a, b)
	first := bCreds.Certificate()
	if got := first.NotAfter.Sub(first.NotBefore); got > 2*lifetime {
		t.Fatalf("B's certificate is valid for %v, want about %v", got, lifetime)
	}
	b.membership.Set(&Membership{
		NodeKey:     b.key,
		Credentials: bCreds,
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id: a.id(), Addresses: []*api.ClusterDirectory_Node_Address{{Host: a.ip.String()}},
		}}},
	})
	b.start(t)

	// Past the first certificate's end, B must hold a later one, and
	// keep it on its data partition.
	time.Sleep(time.Until(first.NotAfter.Add(time.Second)))
	renewed := bCreds.Certificate()
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("B's certificate still ends at %v after that time passed: not renewed", first.NotAfter)
	}
	fixture.Eventually(t, 10*time.Second, "renewed identity on B's data partition", func() error {
		b, err := b.cfg.Storage.Root.Data.Node.Identity.Read()
		if err != nil {
			return err
		}
		kept, err := identity.ParseNodePEM(b)
		if err != nil {
			return err
		}
		if !kept.Certificate().NotAfter.After(first.NotAfter) {
			return fmt.Errorf("identity.pem still holds the first certificate")
		}
		return nil
	})

	// A new connection with B's credentials, made after the first
	// certificate expired, is served.
	cc, err := grpc.NewClient(a.curatorAddr(), grpc.WithTransportCredentials(rpc.NodeCredentials(bCreds)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := api.NewCuratorClient(cc).Heartbeat(cctx, &api.HeartbeatRequest{}); err != nil {
		t.Errorf("heartbeat on a new connection with the renewed certificate: %v", err)
	}
	// And the first certificate alone is refused at the handshake now.
	old, err := identity.NewNode(b.key, first.Raw, bCreds.CACertificate().Raw)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := grpc.NewClient(a.curatorAddr(), grpc.WithTransportCredentials(rpc.NodeCredentials(old)))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if _, err := api.NewCuratorClient(oc).Heartbeat(cctx, &api.HeartbeatRequest{}); err == nil {
		t.Errorf("heartbeat with the expired first certificate succeeded")
	}
	if bytes.Equal(renewed.Raw, first.Raw) {
		t.Errorf("renewed certificate is the first one")
	}
}
