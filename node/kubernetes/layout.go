package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
)

// Layout is where Kubernetes lives on a node.
type Layout struct {
	// Bin holds the payload's programs, on the verified system partition
	// (build/kubernetes).
	Bin string
	// Data is Kubernetes' directory on the encrypted data partition:
	// containerd's images and containers, the kubelet's pods and volumes.
	// It survives reboots.
	Data string
	// Run is Kubernetes' directory on the node's tmpfs: configuration
	// files, keys, certificates and sockets, all written again at each
	// start.
	Run string
	// Etc is the node's /etc, where the kubelet reads the machine ID and
	// the user database.
	Etc string
	// Cgroup is the cgroup (v2) directory the components run below, each
	// in a group of its own (cgroup.go); empty, they run in the core's.
	Cgroup string
}

// DefaultBin is where the system partition carries the payload.
const DefaultBin = "/system/kubernetes/bin"

// bin returns the path of the payload's program name.
func (l Layout) bin(name string) string { return filepath.Join(l.Bin, name) }

// workerBin returns the path of name in the payload's worker directory:
// the kubelet and kube-proxy of hyperkube's build for workers
// (build/kubernetes/hyperkube), which a worker's start keeps less of
// resident than the control plane's build. A controller's kube-proxy runs
// from the control plane's build, whose pages its apiserver has already
// made resident.
func (l Layout) workerBin(name string) string { return filepath.Join(l.Bin, "worker", name) }

// run returns the path of name below Run.
func (l Layout) run(name ...string) string {
	return filepath.Join(append([]string{l.Run}, name...)...)
}

// data returns the path of name below Data.
func (l Layout) data(name ...string) string {
	return filepath.Join(append([]string{l.Data}, name...)...)
}

// mkdirs creates dirs, private to root.
func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("when creating %s: %w", d, err)
		}
	}
	return nil
}

// writeFile replaces path with data atomically: a component that reads the
// file again (the apiserver reloads its certificates) never sees half of
// it.
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("when writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("when replacing %s: %w", path, err)
	}
	return nil
}
