package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The Kubernetes components (apiserver, controller manager, scheduler,
// containerd, kubelet, kube-proxy) run in a cgroup of their own,
// DefaultCgroup, of cgroup v2's default CPU weight, while the core stays
// in the root cgroup. There each busy thread of the core weighs as much as
// the components' whole cgroup: on a node whose components fill its CPU
// (an apiserver starting on a small machine, say), etcd's heartbeats and
// the curator's election lease still get theirs, and the node does not
// lose its place in the cluster's consensus for its own Kubernetes. Pods
// run apart, in the kubelet's kubepods cgroup.

// DefaultCgroup is the cgroup the node's Kubernetes components run in.
const DefaultCgroup = "/sys/fs/cgroup/kubernetes"

// componentsCPUWeight is the CPU weight of the components' cgroup.
const componentsCPUWeight = "100"

// prepareCgroup makes the cgroup dir, a child of a cgroup v2 hierarchy's
// root, ready for components: the CPU controller enabled for the root's
// children, dir made, its CPU weight set. What is already so stays.
func prepareCgroup(dir string) error {
	parent := filepath.Dir(dir)
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("when preparing cgroup %s: %s is not a cgroup v2 hierarchy", dir, parent)
	}
	control := filepath.Join(parent, "cgroup.subtree_control")
	enabled, err := os.ReadFile(control)
	if err != nil {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if !slices.Contains(strings.Fields(string(enabled)), "cpu") {
		if err := os.WriteFile(control, []byte("+cpu"), 0); err != nil {
			return fmt.Errorf("when preparing cgroup %s: enabling the CPU controller: %w", dir, err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(componentsCPUWeight), 0); err != nil {
		return fmt.Errorf("when preparing cgroup %s: setting its CPU weight: %w", dir, err)
	}
	return nil
}
