package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// reconcileServer runs reconcileRounds against a fake apiserver with no
// Nodes, and returns the server's record and the channel of node lists.
// healthy is closed after the first round.
func reconcileServer(t *testing.T, objects []object, interval time.Duration) (*rangesServer, chan<- []ClusterNode, <-chan struct{}) {
	t.Helper()
	srv := &rangesServer{patches: map[string][]string{}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	nodesC := make(chan []ClusterNode)
	healthy := make(chan struct{})
	supervisortest.Harness(t, func(ctx context.Context) error {
		return reconcileRounds(ctx, cl, objects, nodesC, nil, interval, func() { close(healthy) })
	})
	return srv, nodesC, healthy
}

func (s *rangesServer) patchCount(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.patches[path])
}

var testObjects = []object{
	{path: "/apis/example.cairn.dev/v1/ones/one", body: map[string]any{"kind": "One"}},
	{path: "/apis/example.cairn.dev/v1/twos/two", body: map[string]any{"kind": "Two"}},
}

// TestReconcileRoundsNodesDoNotReapply gives the reconciler new node
// lists: each applies the resource metrics API's endpoints again, and
// none applies the cluster objects, which the first round applied once.
func TestReconcileRoundsNodesDoNotReapply(t *testing.T) {
	srv, nodesC, healthy := reconcileServer(t, testObjects, time.Hour)
	<-healthy
	controller := ClusterNode{ID: "cairn-a", Controller: true, Addr: netip.MustParseAddr("10.42.0.10")}
	slice := metricsEndpointSlice([]ClusterNode{controller}).path
	for i := range 3 {
		nodesC <- []ClusterNode{controller, {ID: "cairn-b", Worker: i > 0}}
	}
	// A fourth list is taken once the third's round is over.
	nodesC <- []ClusterNode{controller}
	if got := srv.patchCount(slice); got < 3 {
		t.Errorf("the metrics endpoints were applied %d times for 3 node lists, want at least 3", got)
	}
	for _, o := range testObjects {
		if got := srv.patchCount(o.path); got != 1 {
			t.Errorf("%s applied %d times, want once: node lists do not apply the cluster objects", o.path, got)
		}
	}
}

// TestReconcileRoundsByClock leaves the reconciler without node lists:
// the cluster objects are applied again each interval.
func TestReconcileRoundsByClock(t *testing.T) {
	srv, _, healthy := reconcileServer(t, testObjects, 20*time.Millisecond)
	<-healthy
	deadline := time.Now().Add(time.Minute)
	for _, o := range testObjects {
		for srv.patchCount(o.path) < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%s applied %d times in a minute, with an interval of 20 ms", o.path, srv.patchCount(o.path))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestApplyClusterRBAC applies Cairn's objects' cluster roles and
// bindings, and nothing else, through an apiserver that refuses the
// first requests, as one does that does not serve yet.
func TestApplyClusterRBAC(t *testing.T) {
	srv := &rangesServer{patches: map[string][]string{}}
	var mu sync.Mutex
	refuse := 3
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse > 0 {
			refuse--
			http.Error(w, "the apiserver is starting", http.StatusServiceUnavailable)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	objects := append(clusterObjects(), metricsObjects([]byte("CA"))...)
	if err := applyClusterRBAC(fixture.Context(t), cl, objects, t.Logf); err != nil {
		t.Fatal(err)
	}
	var rbac int
	for _, o := range objects {
		want := 0
		if strings.Contains(o.path, "/clusterroles/") || strings.Contains(o.path, "/clusterrolebindings/") {
			want = 1
			rbac++
		}
		if got := srv.patchCount(o.path); got != want {
			t.Errorf("%s applied %d times, want %d", o.path, got, want)
		}
	}
	if rbac < 10 {
		t.Errorf("only %d of Cairn's objects are cluster roles or bindings; want the owner's, the nodes' and the metrics API's", rbac)
	}
}

// bindingServer keeps cluster role bindings as an apiserver does: a
// binding's role cannot change once it is made.
type bindingServer struct {
	mu      sync.Mutex
	roles   map[string]string // binding path → the role it names
	deleted []string
}

func (s *bindingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPatch:
		var b struct {
			RoleRef struct{ Name string } `json:"roleRef"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if old, ok := s.roles[r.URL.Path]; ok && b.RoleRef.Name != "" && old != b.RoleRef.Name {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintf(w, `{"kind":"Status","message":"ClusterRoleBinding %q is invalid: roleRef: Invalid value: %q: cannot change roleRef","code":422}`, path.Base(r.URL.Path), b.RoleRef.Name)
			return
		}
		s.roles[r.URL.Path] = b.RoleRef.Name
		fmt.Fprint(w, `{}`)
	case http.MethodDelete:
		if _, ok := s.roles[r.URL.Path]; !ok {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		delete(s.roles, r.URL.Path)
		s.deleted = append(s.deleted, r.URL.Path)
		fmt.Fprint(w, `{}`)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// TestApplyClusterRBACRebinds applies Cairn's cluster roles and bindings
// over those an earlier version left, which bound the owner and
// kube-proxy to the apiserver's default roles: those two bindings are
// deleted and made again with Cairn's roles, and no other is touched.
func TestApplyClusterRBACRebinds(t *testing.T) {
	const prefix = clusterRBACPrefix + "rolebindings/"
	srv := &bindingServer{roles: map[string]string{
		prefix + "cairn:owners":       "cluster-admin",
		prefix + "cairn:node-proxier": "system:node-proxier",
		prefix + "cairn:pod-network":  "cairn:pod-network",
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	objects := append(clusterObjects(), metricsObjects([]byte("CA"))...)
	// applyClusterRBAC tries again until the apiserver takes every
	// binding; a binding it cannot make again ends the test here.
	ctx, cancel := context.WithTimeout(fixture.Context(t), 10*time.Second)
	defer cancel()
	if err := applyClusterRBAC(ctx, cl, objects, t.Logf); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		prefix + "cairn:owners":       "cairn:owners",
		prefix + "cairn:node-proxier": "cairn:node-proxier",
		prefix + "cairn:proxies":      "cairn:node-proxier",
		prefix + "cairn:pod-network":  "cairn:pod-network",
	} {
		if got := srv.roles[p]; got != want {
			t.Errorf("%s binds %q, want %q", p, got, want)
		}
	}
	slices.Sort(srv.deleted)
	if want := []string{prefix + "cairn:node-proxier", prefix + "cairn:owners"}; !slices.Equal(srv.deleted, want) {
		t.Errorf("deleted %q, want %q", srv.deleted, want)
	}
}
