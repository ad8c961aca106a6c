package curatortest

import (
	"context"
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
)

// TestControlPlane checks that the owner connection reaches a curator
// that leads and lists the bootstrapped node UP.
func TestControlPlane(t *testing.T) {
	cp := StartControlPlane(t)
	mgmt := api.NewManagementClient(cp.OwnerConn(t))
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := mgmt.GetNodes(ctx, &api.GetNodesRequest{})
		cancel()
		if err == nil {
			nodes := res.GetNodes()
			if len(nodes) != 1 || nodes[0].GetId() != cp.Node.ID() || nodes[0].GetState() != api.NodeState_NODE_STATE_UP {
				t.Fatalf("GetNodes() = %v, want only %s UP", nodes, cp.Node.ID())
			}
			return
		}
		// The curator answers Management once it has won its election.
		if time.Now().After(deadline) {
			t.Fatalf("GetNodes as the owner: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
