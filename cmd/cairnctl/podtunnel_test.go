package main

import (
	"bytes"
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/proto/api"
)

// TestNodeDescribePodTunnel reads what nodes published for the pod tunnel
// through GetNodes, as node describe prints it and in JSON.
func TestNodeDescribePodTunnel(t *testing.T) {
	key := bytes.Repeat([]byte{0xca}, 32)
	worker := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{ExternalAddress: "10.42.0.11"}, time.Time{})
	worker.PodNetwork = &api.PodNetwork{WireguardPublicKey: key, PodRange: "10.192.1.0/24"}
	controller := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{ExternalAddress: "10.42.0.10"}, time.Time{})
	controller.PodNetwork = &api.PodNetwork{WireguardPublicKey: key}
	silent := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{ExternalAddress: "10.42.0.12"}, time.Time{})
	dir, s := bootstrapped(t, worker, controller, silent)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	b64 := base64.StdEncoding.EncodeToString(key)
	for _, tc := range []struct {
		node     *api.Node
		line     string
		wantJSON *podTunnelView
	}{
		{worker, "Pod tunnel:      key " + b64 + ", pod range 10.192.1.0/24\n", &podTunnelView{PublicKey: b64, PodRange: "10.192.1.0/24"}},
		{controller, "Pod tunnel:      key " + b64 + ", no pod range (a controller)\n", &podTunnelView{PublicKey: b64}},
		{silent, "Pod tunnel:      -\n", nil},
	} {
		v := describe(t, dir, tc.node.Id, tc.line)
		if diff := cmp.Diff(tc.wantJSON, v.PodTunnel); diff != "" {
			t.Errorf("node describe -o json %s: pod tunnel (-want +got):\n%s", tc.node.Id, diff)
		}
	}
}
