//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch/cluster"
)

// witness is state the owner wrote before a disruptive step, to be found
// again, unchanged, after it: every node record (state and roles), with
// a freshly registered node and an enrolled one given a role among them,
// and a rotated register ticket.
type witness struct {
	ticket []byte
	nodes  map[string]*api.Node
}

// writeWitness makes a batch of owner-visible changes through the
// cluster's curators and records the state they leave.
func (s *suite) writeWitness(t *testing.T, c *cluster.Cluster, o *owner) *witness {
	t.Helper()
	var w *witness
	err := s.withManagement(c, o, func(ctx context.Context, m api.ManagementClient) error {
		old, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
		if err != nil {
			return fmt.Errorf("GetRegisterTicket: %w", err)
		}
		rotated, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: old.GetTicket()})
		if err != nil {
			return fmt.Errorf("RotateRegisterTicket: %w", err)
		}
		// Records nobody but etcd keeps: a node that registers and waits
		// in NEW, and one that enrols and is given a role. The role goes
		// to a node the test plays, not to a member: a KubernetesWorker
		// on a member, with no controller in this cluster, would start
		// containerd and a kubelet that retries forever on the very
		// machines whose etcd the reboots below test.
		addr := c.Nodes()[0].CuratorAddr()
		waiting, worker := newFakeNode(t), newFakeNode(t)
		for _, f := range []*fakeNode{waiting, worker} {
			if err := registerWithinLimit(ctx, t, f, addr, o.caDER, rotated.GetTicket()); err != nil {
				return fmt.Errorf("RegisterNode of %s with the rotated ticket: %w", f.id, err)
			}
		}
		if err := worker.approveAndCommit(ctx, t, m, addr, o.caDER); err != nil {
			return err
		}
		yes := true
		if _, err := m.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: worker.id, KubernetesWorker: &yes}); err != nil {
			return fmt.Errorf("UpdateNodeRoles(%s): %w", worker.id, err)
		}
		w = &witness{ticket: rotated.GetTicket()}
		w.nodes, err = nodeRecords(ctx, m)
		if err != nil {
			return err
		}
		if w.nodes[worker.id].GetRoles().GetKubernetesWorker() == nil {
			return fmt.Errorf("%s was given KubernetesWorker, but its record is %v", worker.id, w.nodes[worker.id])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("writing the witness state: %v", err)
	}
	t.Logf("witness: %d node records and a rotated register ticket", len(w.nodes))
	return w
}

// registerWithinLimit registers f, waiting while the curator refuses
// with ResourceExhausted: the suite's steps before the witness (the
// concurrent registration, the matrix) spend the burst of registrations
// the curator allows from the host's address, which refills one every few
// seconds.
func registerWithinLimit(ctx context.Context, t *testing.T, f *fakeNode, addr string, caDER, ticket []byte) error {
	for {
		err := f.register(ctx, t, addr, caDER, ticket)
		if status.Code(err) != codes.ResourceExhausted {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// checkWitness checks that the state w recorded is all there, unchanged,
// as the owner sees it. what names the step it survived.
func (s *suite) checkWitness(t *testing.T, c *cluster.Cluster, o *owner, w *witness, what string) {
	t.Helper()
	err := s.withManagement(c, o, func(ctx context.Context, m api.ManagementClient) error {
		ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
		if err != nil {
			return fmt.Errorf("GetRegisterTicket: %w", err)
		}
		if !bytes.Equal(ticket.GetTicket(), w.ticket) {
			t.Errorf("after %s the register ticket is not the one rotated before it", what)
		}
		now, err := nodeRecords(ctx, m)
		if err != nil {
			return err
		}
		for id, was := range w.nodes {
			got, ok := now[id]
			switch {
			case !ok:
				t.Errorf("after %s node %s is gone (was %s)", what, id, was.GetState())
			case got.GetState() != was.GetState() || !proto.Equal(got.GetRoles(), was.GetRoles()):
				t.Errorf("after %s node %s is %s with roles %v, was %s with roles %v", what, id, got.GetState(), got.GetRoles(), was.GetState(), was.GetRoles())
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("reading the witness state after %s: %v", what, err)
	}
}

// nodeRecords returns every node record, by ID.
func nodeRecords(ctx context.Context, m api.ManagementClient) (map[string]*api.Node, error) {
	res, err := m.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetNodes: %w", err)
	}
	nodes := map[string]*api.Node{}
	for _, n := range res.GetNodes() {
		nodes[n.GetId()] = n
	}
	return nodes, nil
}

// withManagement calls f with a Management client of the first node's
// curator that answers, trying every node in turn for up to two minutes:
// after a disruptive step the cluster may still be settling.
func (s *suite) withManagement(c *cluster.Cluster, o *owner, f func(context.Context, api.ManagementClient) error) error {
	ctx := s.ctxWithin(2 * time.Minute)
	creds, err := rpc.OwnerCredentials(o.key, o.certDER, o.caDER)
	if err != nil {
		return err
	}
	var last error
	for ctx.Err() == nil {
		for _, n := range c.Nodes() {
			if !n.Running() {
				continue
			}
			cc, err := dialOnce(n.CuratorAddr(), creds)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			last = f(cctx, api.NewManagementClient(cc))
			cancel()
			cc.Close()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	return fmt.Errorf("no curator answered in time; last error: %w", last)
}

// dialOnce is a connection to addr with creds, for one use.
func dialOnce(addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("grpc.NewClient(%s): %w", addr, err)
	}
	return cc, nil
}
