package kubernetes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/pkg/fixture"
)

// fakeAPIServer answers the calls reconcileNodes makes from a fixed set of
// Nodes and pods, and records every call.
type fakeAPIServer struct {
	mu    sync.Mutex
	calls []string
	// labels are the Nodes' labels by name.
	labels map[string]map[string]string
	// pods are the pods by node name.
	pods map[string][]string
	// budget makes evictions answer 429.
	budget bool
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	call := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		call += "?" + r.URL.RawQuery
	}
	if len(body) > 0 {
		call += " " + string(body)
	}
	f.calls = append(f.calls, call)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes":
		var items []any
		for _, name := range slices.Sorted(mapKeys(f.labels)) {
			items = append(items, map[string]any{"metadata": map[string]any{"name": name, "labels": f.labels[name]}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
		node := strings.TrimPrefix(r.URL.Query().Get("fieldSelector"), "spec.nodeName=")
		var items []any
		for _, p := range f.pods[node] {
			items = append(items, map[string]any{"metadata": map[string]any{"name": p, "namespace": "default"}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction"):
		if f.budget {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"message":"Cannot evict pod as it would violate the pod's disruption budget."}`)
			return
		}
		fmt.Fprint(w, `{}`)
	case r.Method == http.MethodPatch, r.Method == http.MethodDelete:
		fmt.Fprint(w, `{}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"not found"}`)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestReconcileNodes(t *testing.T) {
	f := &fakeAPIServer{
		labels: map[string]map[string]string{
			"cairn-a": {"kubernetes.io/hostname": "cairn-a"},
			"cairn-b": {labelWorker: ""},
			"cairn-c": {labelWorker: "", labelControlPlane: ""},
			"laptop":  {},
		},
		pods: map[string][]string{"cairn-b": {"web-1"}},
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	cl := &apiClient{server: srv.URL, http: srv.Client()}
	nodes := []ClusterNode{
		{ID: "cairn-a", Controller: true, Worker: true},
		// cairn-b lost KubernetesWorker.
		{ID: "cairn-b", Controller: true},
		{ID: "cairn-c", Worker: true},
		// cairn-d holds the role, but its kubelet has not registered.
		{ID: "cairn-d", Worker: true},
	}
	if err := reconcileNodes(fixture.Context(t), cl, nodes, nil, t.Logf); err != nil {
		t.Fatalf("reconcileNodes: %v", err)
	}
	want := []string{
		"GET /api/v1/nodes",
		`PATCH /api/v1/nodes/cairn-a {"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"","node-role.kubernetes.io/worker":""}}}`,
		`PATCH /api/v1/nodes/cairn-b {"spec":{"unschedulable":true}}`,
		"GET /api/v1/pods?fieldSelector=spec.nodeName%3Dcairn-b",
		`POST /api/v1/namespaces/default/pods/web-1/eviction {"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"default"}}`,
		"DELETE /api/v1/nodes/cairn-b",
		`PATCH /api/v1/nodes/cairn-c {"metadata":{"labels":{"node-role.kubernetes.io/control-plane":null}}}`,
	}
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}

	// A pod that a disruption budget holds keeps its Node until a later
	// round.
	f.calls, f.budget = nil, true
	if err := reconcileNodes(fixture.Context(t), cl, []ClusterNode{{ID: "cairn-a", Controller: true, Worker: true}, {ID: "cairn-c", Worker: true}}, nil, t.Logf); err != nil {
		t.Fatalf("reconcileNodes: %v", err)
	}
	for _, c := range f.calls {
		if strings.HasPrefix(c, "DELETE") {
			t.Errorf("deleted a Node whose pod a disruption budget holds: %s", c)
		}
	}
}
