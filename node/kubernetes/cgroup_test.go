package kubernetes

import (
	"strings"
	"testing"
)

// TestPrepareCgroupRefuses: a cgroup is prepared only below a cgroup v2
// hierarchy. (The end-to-end Kubernetes suite runs every component in
// DefaultCgroup on a real node.)
func TestPrepareCgroupRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := prepareCgroup(dir + "/kubernetes"); err == nil || !strings.Contains(err.Error(), "is not a cgroup v2 hierarchy") {
		t.Errorf("prepareCgroup below a plain directory = %v, want an error saying it is no cgroup v2 hierarchy", err)
	}
	if err := prepareCgroup("/nonexistent/kubernetes"); err == nil {
		t.Error("prepareCgroup below a missing directory succeeded")
	}
}
