package roleserve

import (
	"net/netip"
	"testing"

	"cairn.dev/cairn/node/consensus"
	api "cairn.dev/cairn/proto/api"
)

// TestJudgeHealth judges every way a node can fall short of healthy, and
// the two roles sets that are healthy.
func TestJudgeHealth(t *testing.T) {
	member := &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}}
	worker := &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}}
	serving := netip.MustParseAddrPort("10.0.0.1:7835")
	for name, c := range map[string]struct {
		pushed  bool
		roles   *api.NodeRoles
		etcd    *consensus.Status
		curator netip.AddrPort
		ready   bool
		want    Health
	}{
		"status not pushed":      {roles: worker, want: Health{Waiting: "its status to reach the curator leader"}},
		"no roles":               {pushed: true, want: Health{Waiting: "its roles"}},
		"member without etcd":    {pushed: true, roles: member, curator: serving, want: Health{Waiting: "its etcd member to vote"}},
		"member without curator": {pushed: true, roles: member, etcd: &consensus.Status{}, want: Health{Waiting: "its curator to serve"}},
		"member":                 {pushed: true, roles: member, etcd: &consensus.Status{}, curator: serving, want: Health{Healthy: true}},
		"worker not Ready":       {pushed: true, roles: worker, want: Health{Waiting: "its Kubernetes node to be Ready"}},
		"worker":                 {pushed: true, roles: worker, ready: true, want: Health{Healthy: true}},
		"no Kubernetes role":     {pushed: true, roles: &api.NodeRoles{}, want: Health{Healthy: true}},
	} {
		if got := judgeHealth(c.pushed, c.roles, c.etcd, c.curator, c.ready); got != c.want {
			t.Errorf("%s: %+v, want %+v", name, got, c.want)
		}
	}
}
