package kubernetes

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// firstPodServer plays an apiserver that has not yet made the namespace
// default for its first refusals POSTs, and then has a kube-root-ca.crt
// there already, as a restarted reconciler finds it.
type firstPodServer struct {
	mu       sync.Mutex
	refusals int
	posts    map[string][]map[string]any
}

func (s *firstPodServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodPost {
		http.Error(w, "only POST here", http.StatusMethodNotAllowed)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.posts[r.URL.Path] = append(s.posts[r.URL.Path], obj)
	switch {
	case s.refusals > 0:
		s.refusals--
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"kind":"Status","message":"namespaces \"default\" not found","code":404}`)
	case r.URL.Path == "/api/v1/namespaces/default/configmaps":
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"kind":"Status","message":"configmaps \"kube-root-ca.crt\" already exists","code":409}`)
	default:
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "{}")
	}
}

// TestFirstPodObjects makes the namespace default's service account and
// kube-root-ca.crt, the latter with the Kubernetes CA, through an
// apiserver that refuses them until the namespace exists: each is asked
// again until it is made or found there, and then the runnable is done.
func TestFirstPodObjects(t *testing.T) {
	srv := &firstPodServer{refusals: 2, posts: map[string][]map[string]any{}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	ca := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	finished := make(chan error, 1)
	supervisortest.Harness(t, func(ctx context.Context) error {
		err := runFirstPodObjects(ctx, cl, firstPodObjects([]byte(ca)))
		finished <- err
		return err
	})
	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("runFirstPodObjects = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("runFirstPodObjects did not finish within a minute")
	}

	srv.mu.Lock()
	defer srv.mu.Unlock()
	sa := srv.posts["/api/v1/namespaces/default/serviceaccounts"]
	cm := srv.posts["/api/v1/namespaces/default/configmaps"]
	if len(sa) != 3 || len(cm) != 1 {
		t.Fatalf("%d POSTs of the service account and %d of the ConfigMap; want 3 (two refused, as the namespace did not exist yet) and 1 (found)", len(sa), len(cm))
	}
	name := func(o map[string]any) any { return o["metadata"].(map[string]any)["name"] }
	if o := sa[2]; o["kind"] != "ServiceAccount" || name(o) != "default" {
		t.Errorf("the service account posted is %v, want ServiceAccount default", o)
	}
	if o := cm[0]; o["kind"] != "ConfigMap" || name(o) != "kube-root-ca.crt" || o["data"].(map[string]any)["ca.crt"] != ca {
		t.Errorf("the ConfigMap posted is %v, want kube-root-ca.crt with ca.crt the Kubernetes CA", o)
	}
}
