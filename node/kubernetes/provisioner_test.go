package kubernetes

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/pkg/fixture"
)

// pvServer answers GETs of PersistentVolumes: 200 for those in pvs, 500
// for those in failing, 404 for the rest. It records what was asked.
type pvServer struct {
	mu      sync.Mutex
	pvs     []string
	failing []string
	asked   []string
}

func (s *pvServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/persistentvolumes/")
	if r.Method != http.MethodGet || !ok {
		w.WriteHeader(http.StatusMethodNotAllowed)
		fmt.Fprint(w, `{"message":"the provisioner only reads here"}`)
		return
	}
	s.asked = append(s.asked, name)
	switch {
	case slices.Contains(s.pvs, name):
		fmt.Fprintf(w, `{"metadata":{"name":%q}}`, name)
	case slices.Contains(s.failing, name):
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"message":"etcdserver: request timed out"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"not found"}`)
	}
}

func claimOf(uid string) claim {
	var c claim
	c.Metadata.Name, c.Metadata.Namespace, c.Metadata.UID = "data-"+uid, "default", uid
	return c
}

// TestOrphans checks what the provisioner's sweep deletes after a restart:
// only volumes that neither a claim nor a PersistentVolume has, and
// nothing when the apiserver cannot say.
func TestOrphans(t *testing.T) {
	srv := &pvServer{pvs: []string{"pvc-retained"}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	p := &provisioner{node: "cairn-a", cl: &apiClient{server: ts.URL, http: ts.Client()}}
	cs := map[string]claim{"default/data-pending": claimOf("pending"), "default/data-bound": claimOf("bound")}
	var vols []localvolume.Volume
	for _, name := range []string{"pvc-bound", "pvc-pending", "pvc-retained", "pvc-gone"} {
		vols = append(vols, localvolume.Volume{Name: name})
	}
	names := func(vs []localvolume.Volume) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Name)
		}
		return out
	}

	got, err := p.orphans(fixture.Context(t), vols, cs)
	if err != nil {
		t.Fatalf("orphans: %v", err)
	}
	if !slices.Equal(names(got), []string{"pvc-gone"}) {
		t.Errorf("orphans = %q, want only pvc-gone: the others have a claim or a PersistentVolume", names(got))
	}
	if want := []string{"pvc-retained", "pvc-gone"}; !slices.Equal(srv.asked, want) {
		t.Errorf("asked the apiserver for %q, want %q: a volume with a claim costs no call", srv.asked, want)
	}

	// An apiserver that fails for one volume: no orphan at all, so the
	// sweep deletes nothing and runs again with the claims' next list.
	srv.failing = []string{"pvc-gone"}
	got, err = p.orphans(fixture.Context(t), vols, cs)
	if err == nil || !strings.Contains(err.Error(), "pvc-gone") || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("orphans with a failing apiserver = %q, %v; want an error naming the volume and the cause", names(got), err)
	}
	if got != nil {
		t.Errorf("orphans with a failing apiserver = %q, want none", names(got))
	}
}
