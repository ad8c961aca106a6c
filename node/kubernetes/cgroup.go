package kubernetes

import (
	"fmt"
	"path/filepath"

	"cairn.dev/cairn/pkg/cgroup"
)

// The Kubernetes components (apiserver, controller manager, scheduler,
// containerd, kubelet, kube-proxy) run below a cgroup of their own,
// DefaultCgroup, of cgroup v2's default CPU weight, while the core stays
// in the root cgroup. There each busy thread of the core weighs as much as
// the components' whole cgroup: on a node whose components fill its CPU
// (an apiserver starting on a small machine, say), etcd's heartbeats and
// the curator's election lease still get theirs, and the node does not
// lose its place in the cluster's consensus for its own Kubernetes. Pods
// run apart, in the kubelet's kubepods cgroup.
//
// Within DefaultCgroup each component has a group of its own, named after
// its program, so that CPU is shared between components by their weight
// rather than by how many threads each keeps busy. containerd's group
// also holds its shims and the runc they run, which start every
// container: while a worker starts dozens of pods at once they are many
// and busy, and the kubelet, sharing one group with them thread for
// thread, fell behind its node status until the controller manager
// marked the node NotReady (issue 37's serial shard). Two components
// weigh more than the rest, as the others wait on them: the kubelet,
// which keeps its node in the cluster and drives its pods, and the
// apiserver, which every other component and client calls.

// DefaultCgroup is the cgroup the node's Kubernetes components run below.
const DefaultCgroup = "/sys/fs/cgroup/kubernetes"

// componentWeights are the CPU weights of the components that do not
// weigh cgroup.DefaultWeight, by program name.
var componentWeights = map[string]int{
	"kubelet":        400,
	"kube-apiserver": 400,
}

// componentCgroup prepares the group of the component whose program is at
// path, below the layout's cgroup, and returns its directory.
func (l Layout) componentCgroup(path string) (string, error) {
	if err := cgroup.Prepare(l.Cgroup, cgroup.DefaultWeight); err != nil {
		return "", err
	}
	name := filepath.Base(path)
	weight, ok := componentWeights[name]
	if !ok {
		weight = cgroup.DefaultWeight
	}
	dir := filepath.Join(l.Cgroup, name)
	if err := cgroup.Prepare(dir, weight); err != nil {
		return "", fmt.Errorf("when preparing the cgroup of %s: %w", name, err)
	}
	return dir, nil
}
