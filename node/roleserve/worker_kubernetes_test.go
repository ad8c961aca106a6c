package roleserve

import (
	"net/netip"
	"testing"

	"cairn.dev/cairn/node/consensus"
	api "cairn.dev/cairn/proto/api"
)

// TestKubernetesUnitsFollowRoles checks which of the three Kubernetes
// units run for each combination of the Kubernetes roles and of a voting
// etcd member, and that only the controller is built on the member.
func TestKubernetesUnitsFollowRoles(t *testing.T) {
	ip := netip.MustParseAddr("10.42.0.10")
	etcd := &consensus.Status{}
	controller := &api.NodeRoles_KubernetesController{}
	worker := &api.NodeRoles_KubernetesWorker{}
	units := []struct {
		name string
		r    kubeRunner
	}{
		{"kubecontroller", &workerKubeController{}},
		{"kubeworker", &workerKubeWorker{}},
		{"kubeservices", &workerKubeServices{}},
	}
	for _, tc := range []struct {
		name  string
		roles *api.NodeRoles
		etcd  *consensus.Status
		// on says, in the order of units, which run.
		on [3]bool
	}{
		{"no role", &api.NodeRoles{}, etcd, [3]bool{}},
		{"controller", &api.NodeRoles{KubernetesController: controller}, etcd, [3]bool{true, false, true}},
		{"controller without etcd", &api.NodeRoles{KubernetesController: controller}, nil, [3]bool{}},
		{"worker", &api.NodeRoles{KubernetesWorker: worker}, nil, [3]bool{false, true, false}},
		{"both", &api.NodeRoles{KubernetesController: controller, KubernetesWorker: worker}, etcd, [3]bool{true, true, false}},
		{"both without etcd", &api.NodeRoles{KubernetesController: controller, KubernetesWorker: worker}, nil, [3]bool{false, true, false}},
	} {
		s := nodeState{roles: tc.roles, ip: ip, etcd: tc.etcd}
		for i, u := range units {
			want := kubernetesInputs{on: tc.on[i], ip: ip}
			if u.name == "kubecontroller" && want.on {
				want.etcd = etcd
			}
			if got := u.r.inputs(s); got != want {
				t.Errorf("%s: inputs of %s = %+v, want %+v", tc.name, u.name, got, want)
			}
		}
	}
}
