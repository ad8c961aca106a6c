package kubernetes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/node/kubernetes/metricsapi"
)

// TestMetricsEndpointSlice checks that the resource metrics API's
// endpoints are the controllers, at their addresses, and nothing else.
func TestMetricsEndpointSlice(t *testing.T) {
	nodes := []ClusterNode{
		{ID: "cairn-a", Controller: true, Addr: netip.MustParseAddr("10.42.0.10")},
		{ID: "cairn-b", Worker: true, Addr: netip.MustParseAddr("10.42.0.11")},
		{ID: "cairn-c", Controller: true, Worker: true, Addr: netip.MustParseAddr("10.42.0.12")},
		{ID: "cairn-d", Controller: true}, // no address known yet
	}
	o := metricsEndpointSlice(nodes)
	if !strings.HasSuffix(o.path, "/namespaces/kube-system/endpointslices/cairn-metrics") {
		t.Errorf("path %s", o.path)
	}
	b, err := json.Marshal(o.body)
	if err != nil {
		t.Fatal(err)
	}
	var slice struct {
		Metadata struct {
			Labels map[string]string
		}
		Endpoints []struct {
			Addresses []string
		}
		Ports []struct {
			Name string
			Port int
		}
	}
	if err := json.Unmarshal(b, &slice); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, e := range slice.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	if strings.Join(addrs, ",") != "10.42.0.10,10.42.0.12" {
		t.Errorf("endpoints %v, want the two controllers with an address", addrs)
	}
	if slice.Metadata.Labels["kubernetes.io/service-name"] != "cairn-metrics" {
		t.Errorf("labels %v: the slice does not name its Service", slice.Metadata.Labels)
	}
	if len(slice.Ports) != 1 || slice.Ports[0].Name != "https" || slice.Ports[0].Port != 7837 {
		t.Errorf("ports %+v, want https 7837 (the Service's port name)", slice.Ports)
	}
}

// TestKubeletsOf checks that the kubelets scraped are named by their
// Nodes' names, as follow keys Nodes, and that a Node without an internal
// address is left out.
func TestKubeletsOf(t *testing.T) {
	nodes := map[string]kubeNode{}
	for _, raw := range []string{
		`{"metadata":{"name":"cairn-b"},"status":{"addresses":[{"type":"InternalIP","address":"10.42.0.12"}]}}`,
		`{"metadata":{"name":"cairn-a"},"status":{"addresses":[{"type":"Hostname","address":"cairn-a"},{"type":"InternalIP","address":"10.42.0.11"}]}}`,
		`{"metadata":{"name":"cairn-c"},"status":{"addresses":[{"type":"Hostname","address":"cairn-c"}]}}`,
	} {
		key, n, err := decodeObject[kubeNode](json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		nodes[key] = n
	}
	got := kubeletsOf(nodes, 10250)
	want := []metricsapi.Kubelet{{Node: "cairn-a", Addr: "10.42.0.11:10250"}, {Node: "cairn-b", Addr: "10.42.0.12:10250"}}
	if !slices.Equal(got, want) {
		t.Errorf("kubeletsOf = %+v, want %+v", got, want)
	}
}

// TestWaitFrontProxyTrust: while the apiserver refuses the metrics API its
// read of extension-apiserver-authentication (before the reconciler allows
// it), the metrics API asks again rather than dying, and then takes the
// front proxy's CA and names; an answer other than a refusal ends the
// wait at once.
func TestWaitFrontProxyTrust(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))

	var asked atomic.Int32
	refusals := int32(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) <= refusals {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"kind":"Status","message":"configmaps \"extension-apiserver-authentication\" is forbidden"}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]string{
			"requestheader-client-ca-file": ca,
			"requestheader-allowed-names":  `["` + FrontProxyClient + `"]`,
		}})
	}))
	defer srv.Close()
	cl := &apiClient{server: srv.URL, http: srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var said []string
	pool, names, err := waitFrontProxyTrust(ctx, cl, func(f string, args ...any) { said = append(said, fmt.Sprintf(f, args...)) })
	if err != nil {
		t.Fatalf("waitFrontProxyTrust: %v", err)
	}
	if n := asked.Load(); n != refusals+1 {
		t.Errorf("asked %d times, want %d (two refusals, then the answer)", n, refusals+1)
	}
	if !slices.Equal(names, []string{FrontProxyClient}) {
		t.Errorf("front proxy names %q, want [%s]", names, FrontProxyClient)
	}
	if pool == nil || !pool.Equal(certPool(t, der)) {
		t.Errorf("the front proxy CA pool is not the published CA's")
	}
	if len(said) != 1 || !strings.Contains(said[0], "forbidden") {
		t.Errorf("said %q, want the refusal once", said)
	}

	// Any other failure is the caller's to handle: no waiting.
	srv404 := httptest.NewServer(http.NotFoundHandler())
	defer srv404.Close()
	_, _, err = waitFrontProxyTrust(ctx, &apiClient{server: srv404.URL, http: srv404.Client()}, t.Logf)
	if !answered(err, http.StatusNotFound) {
		t.Errorf("against a 404 got %v, want the 404 at once", err)
	}
}

func certPool(t *testing.T, der []byte) *x509.CertPool {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}
