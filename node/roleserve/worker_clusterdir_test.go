package roleserve

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// recordedValue is a memory.Value that keeps every value set on it.
type recordedValue[T any] struct {
	memory.Value[T]
	mu  sync.Mutex
	all []T
}

func (v *recordedValue[T]) Set(x T) {
	v.mu.Lock()
	v.all = append(v.all, x)
	v.mu.Unlock()
	v.Value.Set(x)
}

func (v *recordedValue[T]) sets() []T {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]T(nil), v.all...)
}

func directoryOf(hosts ...string) *api.ClusterDirectory {
	dir := &api.ClusterDirectory{}
	for i, h := range hosts {
		dir.Nodes = append(dir.Nodes, &api.ClusterDirectory_Node{
			Id:        fmt.Sprintf("cairn-%016x", i),
			Addresses: []*api.ClusterDirectory_Node_Address{{Host: h}},
		})
	}
	return dir
}

// TestClusterdirWritesWhatClusterwatchLearns checks that workerClusterdir
// stores Membership.ClusterDirectory at once, then each directory published
// to it that lists a node, by an atomic replacement of the file, and
// publishes on stored what the file holds.
func TestClusterdirWritesWhatClusterwatchLearns(t *testing.T) {
	n := newTestNode(t, 0, 0, 0, 0)
	first, later := directoryOf("10.42.0.10"), directoryOf("10.42.0.10", "10.42.0.11")
	n.membership.Set(&Membership{NodeKey: n.key, ClusterDirectory: first})
	var directory memory.Value[*api.ClusterDirectory]
	// A directory that lists no node is never stored.
	directory.Set(&api.ClusterDirectory{})
	stored := &recordedValue[*api.ClusterDirectory]{}
	esp := &n.cfg.Storage.Root.ESP.Cairn
	runWorker(t, (&workerClusterdir{
		membership: &n.membership,
		directory:  &directory,
		file:       esp,
		stored:     stored,
	}).run)

	fixture.Eventually(t, 10*time.Second, "the membership's directory on the ESP", func() error {
		return wantProtoFile(esp.ClusterDirectory.Read, first)
	})
	directory.Set(later)
	fixture.Eventually(t, 10*time.Second, "the published directory on the ESP", func() error {
		if s := stored.sets(); len(s) == 0 || !proto.Equal(s[len(s)-1], later) {
			return fmt.Errorf("stored was set to %v, want %v last", s, later)
		}
		return wantProtoFile(esp.ClusterDirectory.Read, later)
	})
	for i, s := range stored.sets() {
		if len(s.GetNodes()) == 0 {
			t.Errorf("set %d of stored is %v, a directory of no node", i, s)
		}
	}
	entries, err := os.ReadDir(esp.FullPath())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"cluster_directory.pb"}; !cmp.Equal(names, want) {
		t.Errorf("%s holds %q, want only %q: an unfinished write left a file", esp.FullPath(), names, want)
	}
}
