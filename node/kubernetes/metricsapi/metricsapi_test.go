package metricsapi

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity/identitytest"
)

// kubeletAnswer is a kubelet's /metrics/resource answer as kubelets of
// the payload's version write it, with the node's and one container's
// CPU time (cpu) and working set at ms (Unix milliseconds).
func kubeletAnswer(cpu float64, memory int, ms int64) string {
	return fmt.Sprintf(`# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="agent",namespace="default",pod="agent-1"} %[1]g %[3]d
container_cpu_usage_seconds_total{container="sidecar",namespace="default",pod="agent-1"} %[1]g %[3]d
container_cpu_usage_seconds_total{container="dns",namespace="kube-system",pod="dns-1"} 1 %[3]d
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="agent",namespace="default",pod="agent-1"} %[2]d %[3]d
container_memory_working_set_bytes{container="sidecar",namespace="default",pod="agent-1"} %[2]d %[3]d
container_memory_working_set_bytes{container="dns",namespace="kube-system",pod="dns-1"} 1.2e+07 %[3]d
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="agent",namespace="default",pod="agent-1"} 1.7e+09 %[3]d
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total %[1]g %[3]d
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes %[2]d %[3]d
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="agent-1"} %[1]g %[3]d
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`, cpu, memory, ms)
}

func TestParseScrape(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	sc, err := parseScrape(strings.NewReader(kubeletAnswer(12.5, 4096, at.UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	want := reading{cpu: 12.5, cpuAt: at, memory: 4096, memoryAt: at}
	if sc.node != want {
		t.Errorf("node reading %+v, want %+v", sc.node, want)
	}
	if got := sc.containers[containerKey{"default", "agent-1", "agent"}]; got != want {
		t.Errorf("container agent's reading %+v, want %+v", got, want)
	}
	if got := sc.containers[containerKey{"kube-system", "dns-1", "dns"}].memory; got != 12_000_000 {
		t.Errorf("container dns's working set %d, want 12000000", got)
	}
	if len(sc.containers) != 3 {
		t.Errorf("%d containers read, want 3: %+v", len(sc.containers), sc.containers)
	}

	// A sample without its time gives no reading: no rate can be
	// computed from it.
	sc, err = parseScrape(strings.NewReader("# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.node.complete() || !sc.node.cpuAt.IsZero() {
		t.Errorf("a sample without a timestamp was read: %+v", sc.node)
	}
	if _, err := parseScrape(strings.NewReader("node_cpu_usage_seconds_total{ 3\n")); err == nil {
		t.Error("a malformed answer was parsed without an error")
	}
}

func TestStoreUsage(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := newStore(time.Minute)
	s.now = func() time.Time { return now }
	add := func(node string, cpu float64, memory int, at time.Time) {
		t.Helper()
		sc, err := parseScrape(strings.NewReader(kubeletAnswer(cpu, memory, at.UnixMilli())))
		if err != nil {
			t.Fatal(err)
		}
		s.add(node, sc)
	}
	add("n1", 10, 100, now.Add(-20*time.Second))
	if got := s.nodeUsage(); len(got) != 0 {
		t.Errorf("usage after one scrape: %+v, want none", got)
	}
	add("n1", 12.5, 200, now.Add(-10*time.Second))
	u, ok := s.nodeUsage()["n1"]
	if !ok {
		t.Fatal("no usage of n1 after two scrapes")
	}
	if want := (usage{at: now.Add(-10 * time.Second), window: 10 * time.Second, cpu: 0.25, memory: 200}); u != want {
		t.Errorf("n1's usage %+v, want %+v", u, want)
	}
	pods := s.podUsage()
	agent := pods[podKey{"default", "agent-1"}]
	if len(agent) != 2 || agent[0].name != "agent" || agent[1].name != "sidecar" || agent[0].cpu != 0.25 {
		t.Errorf("agent-1's containers %+v, want agent and sidecar at 0.25 cores", agent)
	}
	// dns used no CPU between the scrapes: a usage of zero, not none.
	if dns := pods[podKey{"kube-system", "dns-1"}]; len(dns) != 1 || dns[0].cpu != 0 {
		t.Errorf("dns-1's containers %+v, want one at 0 cores", dns)
	}

	// A scrape that brings the node's reading again, stamped as before
	// (its kubelet had not read it anew), keeps the usage it had.
	add("n1", 12.5, 300, now.Add(-10*time.Second))
	if u, ok := s.nodeUsage()["n1"]; !ok || u.window != 10*time.Second || u.cpu != 0.25 {
		t.Errorf("n1's usage after a scrape of the same stamp: %+v (found: %v), want 0.25 cores over 10 s", u, ok)
	}
	if got := s.podUsage()[podKey{"default", "agent-1"}]; len(got) != 2 {
		t.Errorf("agent-1's containers after a scrape of the same stamp: %+v, want both", got)
	}

	// A container that restarted counts from zero again: no usage until
	// its next scrape.
	add("n1", 1, 200, now)
	if got := s.podUsage()[podKey{"default", "agent-1"}]; len(got) != 0 {
		t.Errorf("usage across a restart: %+v", got)
	}

	// A kubelet that stopped answering: its usage goes once it is old.
	now = now.Add(2 * time.Minute)
	if got := s.nodeUsage(); len(got) != 0 {
		t.Errorf("usage of a node not scraped for 2 minutes: %+v", got)
	}
	s.retain(nil)
	if len(s.nodes) != 0 {
		t.Errorf("nodes kept after retain(nil): %v", s.nodes)
	}
}

// testCA is a CA of the tests, with the pool that trusts it.
type testCA struct {
	*identitytest.CA
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	ca := identitytest.NewCA(t, name)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return testCA{CA: ca, pool: pool}
}

// issue returns a certificate of ca named cn, for usage, valid for ip.
func (ca testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, ip net.IP) tls.Certificate {
	t.Helper()
	key := identitytest.NewKey(t)
	tmpl := x509.Certificate{
		Subject:  pkix.Name{CommonName: cn},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der := ca.Issue(t, tmpl, key.Public().(ed25519.PublicKey))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// allowAlice lets alice read everything and records what was asked.
type allowAlice struct {
	mu    sync.Mutex
	asked []Request
}

func (a *allowAlice) Allowed(_ context.Context, r Request) (bool, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, r)
	if r.User != "alice" {
		return false, "only alice may", nil
	}
	return true, "", nil
}

// onlyAgents is a Selector for which selectors match the agent pods and
// the node n1.
type onlyAgents struct{}

func (onlyAgents) Select(_ context.Context, resource, namespace, labels, fields string) (map[string]bool, error) {
	if labels == "bad!" {
		return nil, fmt.Errorf("unable to parse requirement %q", labels)
	}
	if resource == "nodes" {
		return map[string]bool{"n1": true}, nil
	}
	return map[string]bool{"default/agent-1": true}, nil
}

// TestServer scrapes two kubelets over TLS, as the controller does, and
// reads the API over TLS as the apiserver's front proxy: who may read it,
// what it answers, and how it refuses.
func TestServer(t *testing.T) {
	kubeCA, frontCA, otherCA := newTestCA(t, "kubernetes"), newTestCA(t, "front proxy"), newTestCA(t, "other")
	loopback := net.IPv4(127, 0, 0, 1)

	// Two kubelets whose counters advance at each scrape: n1 by half a
	// core-second a tenth of a second, n2 by nothing.
	var kubelets []Kubelet
	for i, rate := range []float64{0.5, 0} {
		var mu sync.Mutex
		cpu, ms := 10.0, time.Now().UnixMilli()
		k := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "cairn:metrics" {
				http.Error(w, "who are you", http.StatusUnauthorized)
				return
			}
			mu.Lock()
			cpu, ms = cpu+rate, ms+100
			fmt.Fprint(w, kubeletAnswer(cpu, 1<<20, ms))
			mu.Unlock()
		}))
		k.TLS = &tls.Config{
			Certificates: []tls.Certificate{kubeCA.issue(t, "kubelet", x509.ExtKeyUsageServerAuth, loopback)},
			ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: kubeCA.pool,
		}
		k.StartTLS()
		t.Cleanup(k.Close)
		kubelets = append(kubelets, Kubelet{Node: fmt.Sprintf("n%d", i+1), Addr: k.Listener.Addr().String()})
	}
	// A third kubelet that does not answer.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	kubelets = append(kubelets, Kubelet{Node: "n3", Addr: deadAddr})

	authz := &allowAlice{}
	srv := New(Config{
		Authorizer: authz, Selector: onlyAgents{}, Proxies: []string{"cairn:front-proxy-client"},
		Kubelets: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{kubeCA.issue(t, "cairn:metrics", x509.ExtKeyUsageClientAuth, nil)},
			RootCAs:      kubeCA.pool,
		}}},
		Interval: 200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var failedMu sync.Mutex
	failed := map[string]error{}
	scraped := make(chan error, 1)
	go func() {
		scraped <- srv.Scrape(ctx, func() []Kubelet { return kubelets }, func(f map[string]error) {
			failedMu.Lock()
			failed = f
			failedMu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-scraped; err != context.Canceled {
			t.Errorf("Scrape ended with %v, want context.Canceled", err)
		}
	})

	api := httptest.NewUnstartedServer(srv.Handler())
	api.TLS = TLSConfig(kubeCA.issue(t, "metrics", x509.ExtKeyUsageServerAuth, loopback), frontCA.pool)
	api.StartTLS()
	t.Cleanup(api.Close)

	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: kubeCA.pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}
	proxyCert := frontCA.issue(t, "cairn:front-proxy-client", x509.ExtKeyUsageClientAuth, nil)
	strangerCert := frontCA.issue(t, "someone", x509.ExtKeyUsageClientAuth, nil)
	otherCert := otherCA.issue(t, "cairn:front-proxy-client", x509.ExtKeyUsageClientAuth, nil)
	proxy := client(&proxyCert)
	get := func(c *http.Client, path, user string, groups ...string) (int, []byte, error) {
		req, err := http.NewRequest(http.MethodGet, api.URL+"/apis/"+GroupVersion+path, nil)
		if err != nil {
			return 0, nil, err
		}
		if user != "" {
			req.Header.Set("X-Remote-User", user)
		}
		for _, g := range groups {
			req.Header.Add("X-Remote-Group", g)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}

	// Wait until both answering nodes have a usage: two scrapes each.
	var nodes struct {
		Kind  string
		Items []nodeMetrics
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := get(proxy, "/nodes", "alice", "devs")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			t.Fatalf("GET nodes as alice: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &nodes); err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
		if len(nodes.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the nodes with a usage are %+v, want n1 and n2", nodes.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if nodes.Kind != "NodeMetricsList" {
		t.Errorf("kind %q, want NodeMetricsList", nodes.Kind)
	}
	// n1 used 0.5 core-seconds per 100 ms: 5 cores; n2 nothing.
	if n := nodes.Items[0]; n.Metadata.Name != "n1" || n.Usage.CPU != "5000000000n" || n.Usage.Memory != "1048576" || n.Window != "100ms" {
		t.Errorf("n1's metrics %+v, want 5 cores and 1 MiB over 100 ms", n)
	}
	if n := nodes.Items[1]; n.Metadata.Name != "n2" || n.Usage.CPU != "0n" {
		t.Errorf("n2's metrics %+v, want 0 cores", n)
	}
	failedMu.Lock()
	if err := failed["n3"]; err == nil || !strings.Contains(err.Error(), "n3") || len(failed) != 1 {
		t.Errorf("the last round's failures %v, want one error naming n3", failed)
	}
	failedMu.Unlock()

	// The requests were authorized with what the proxy said.
	authz.mu.Lock()
	first := authz.asked[0]
	authz.mu.Unlock()
	if first.User != "alice" || len(first.Groups) != 1 || first.Groups[0] != "devs" || first.Verb != "list" || first.Resource != "nodes" {
		t.Errorf("authorized %+v, want alice in devs listing nodes", first)
	}

	for _, tc := range []struct {
		name       string
		client     *http.Client
		path, user string
		code       int
		has        string
	}{
		{"discovery, no certificate", client(nil), "", "", http.StatusOK, `"kind":"PodMetrics"`},
		{"one node", proxy, "/nodes/n2", "alice", http.StatusOK, `"name":"n2"`},
		{"a node without usage", proxy, "/nodes/n3", "alice", http.StatusNotFound, `nodemetrics.metrics.k8s.io \"n3\" not found`},
		{"pods of a namespace", proxy, "/namespaces/default/pods", "alice", http.StatusOK, `"name":"sidecar"`},
		{"pods of every namespace", proxy, "/pods", "alice", http.StatusOK, `"namespace":"kube-system"`},
		{"one pod", proxy, "/namespaces/kube-system/pods/dns-1", "alice", http.StatusOK, `"name":"dns"`},
		{"a pod of another namespace", proxy, "/namespaces/default/pods/dns-1", "alice", http.StatusNotFound, "not found"},
		{"pods selected", proxy, "/pods?labelSelector=app%3Dagent", "alice", http.StatusOK, `"name":"agent-1"`},
		{"a bad selector", proxy, "/pods?labelSelector=bad!", "alice", http.StatusBadRequest, "unable to parse"},
		{"a watch", proxy, "/nodes?watch=true", "alice", http.StatusMethodNotAllowed, "cannot be watched"},
		{"no certificate", client(nil), "/nodes", "alice", http.StatusUnauthorized, "no client certificate"},
		{"a certificate of the CA, not the proxy's", client(&strangerCert), "/nodes", "alice", http.StatusUnauthorized, `\"someone\" is not the front proxy's`},
		{"the proxy naming no one", proxy, "/nodes", "", http.StatusUnauthorized, "named no user"},
		{"a user RBAC refuses", proxy, "/namespaces/default/pods", "mallory", http.StatusForbidden,
			`User \"mallory\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\": only alice may`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.client, tc.path, tc.user)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(string(body), tc.has) {
				t.Errorf("GET %s as %q: %d %s, want %d with %s", tc.path, tc.user, code, body, tc.code, tc.has)
			}
		})
	}
	// The OpenAPI document the aggregator downloads, to anyone.
	if resp, err := client(nil).Get(api.URL + "/openapi/v2"); err != nil {
		t.Errorf("GET /openapi/v2: %v", err)
	} else {
		var doc struct{ Swagger string }
		err := json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || doc.Swagger != "2.0" {
			t.Errorf("GET /openapi/v2: %d, swagger %q, %v; want 200 with a Swagger 2.0 document", resp.StatusCode, doc.Swagger, err)
		}
	}
	// Selected pods are only those the selector matched.
	_, body, _ := get(proxy, "/pods?labelSelector=app%3Dagent", "alice")
	if strings.Contains(string(body), "dns-1") {
		t.Errorf("pods selected by app=agent include dns-1: %s", body)
	}
	// A certificate of another CA is refused: Go's client does not
	// offer it to a server that asks for the front proxy CA's, and a
	// client that did would fail the handshake.
	if code, body, err := get(client(&otherCert), "/nodes", "alice"); err == nil && code != http.StatusUnauthorized {
		t.Errorf("GET /nodes with a certificate of another CA: %d %s, want it refused", code, body)
	}
	insist := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: kubeCA.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &otherCert, nil
		},
	}}}
	if code, body, err := get(insist, "/nodes", "alice"); err == nil {
		t.Errorf("GET /nodes insisting on a certificate of another CA: %d %s, want the handshake failed", code, body)
	}
}
