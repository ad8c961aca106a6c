package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"cairn.dev/cairn/node/kubernetes/metricsapi"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// The resource metrics API (metrics.k8s.io, kubectl top): each controller
// serves it (metricsapi) from its kubelets' resource metrics, behind the
// Service cairn-metrics, whose endpoints the reconciler keeps at the
// controllers, and an APIService that sends the group there.
const (
	metricsNamespace  = "kube-system"
	metricsService    = "cairn-metrics"
	metricsSlice      = "cairn-metrics"
	metricsAPIService = "v1beta1." + metricsapi.Group
	// MetricsUser is the name in the metrics API's certificate
	// (CERTIFICATE_KIND_KUBERNETES_METRICS), which the reconciler's
	// RBAC lets scrape kubelets and ask the apiserver who may read.
	MetricsUser = "cairn:metrics"
	// MetricsServiceName is the serving name in that certificate: the
	// aggregation layer dials the Service's endpoints under it.
	MetricsServiceName = metricsService + "." + metricsNamespace + ".svc"
	// metricsInterval is how often the kubelets are scraped: usage is
	// the mean over about that long, as metrics-server's default.
	metricsInterval = 15 * time.Second
)

// runMetrics serves the resource metrics API on the node's address until
// its certificate is half-way through its life (errRenew).
func (c *Controller) runMetrics(ctx context.Context) error {
	lg := supervisor.Logger(ctx)
	cl, cred, err := issueClient(ctx, c.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_METRICS, c.dir("metrics"), c.apiserverURL())
	if err != nil {
		return err
	}
	if err := cl.waitReady(ctx, c.cfg.Readiness, lg.Infof); err != nil {
		return err
	}
	frontProxyCA, proxies, err := waitFrontProxyTrust(ctx, cl, lg.Infof)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(cred.Cert, cred.Key)
	if err != nil {
		return fmt.Errorf("when loading the metrics certificate: %w", err)
	}
	kubeCA, err := loadPool(cred.CA)
	if err != nil {
		return err
	}
	srv := metricsapi.New(metricsapi.Config{
		Authorizer: reviewer{cl},
		Selector:   selector{cl},
		Proxies:    proxies,
		Kubelets: &http.Client{Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: kubeCA, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 10 * time.Second,
		}},
		Interval: metricsInterval,
	})
	rctx, cancel := context.WithDeadlineCause(ctx, cred.renewAt, errRenew)
	defer cancel()

	// The kubelets to scrape: every Node's, at its internal address.
	var mu sync.Mutex
	var kubelets []metricsapi.Kubelet
	followNodes := func(ctx context.Context) error {
		return follow(ctx, cl, "/api/v1/nodes", healthyAfter(ctx, func(nodes map[string]kubeNode) error {
			ks := kubeletsOf(nodes, c.cfg.Ports.Kubelet)
			mu.Lock()
			kubelets = ks
			mu.Unlock()
			return nil
		}))
	}
	if err := supervisor.Run(rctx, "nodes", followNodes); err != nil {
		return fmt.Errorf("when starting to follow the Nodes: %w", err)
	}
	scrape := func(ctx context.Context) error {
		// A kubelet that fails is said once, and again once it answers.
		lg := supervisor.Logger(ctx)
		failing := map[string]bool{}
		var scraped []metricsapi.Kubelet
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return srv.Scrape(ctx, func() []metricsapi.Kubelet {
			mu.Lock()
			defer mu.Unlock()
			scraped = slices.Clone(kubelets)
			return scraped
		}, func(failed map[string]error) {
			for node, err := range failed {
				if !failing[node] {
					lg.Warningf("Resource metrics: %v", err)
				}
			}
			for node := range failing {
				still := slices.ContainsFunc(scraped, func(k metricsapi.Kubelet) bool { return k.Node == node })
				if still && failed[node] == nil {
					lg.Infof("Resource metrics: node %s's kubelet answers again", node)
				}
			}
			failing = map[string]bool{}
			for node := range failed {
				failing[node] = true
			}
		})
	}
	if err := supervisor.Run(rctx, "scrape", scrape); err != nil {
		return fmt.Errorf("when starting to scrape the kubelets: %w", err)
	}

	var lc net.ListenConfig
	lis, err := lc.Listen(rctx, "tcp", ports.Join(c.cfg.IP.String(), ports.ResourceMetrics))
	if err != nil {
		return fmt.Errorf("when listening for the resource metrics API: %w", err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		TLSConfig:         metricsapi.TLSConfig(cert, frontProxyCA),
		ReadHeaderTimeout: 10 * time.Second,
	}
	stop := context.AfterFunc(rctx, func() { hs.Close() })
	defer stop()
	lg.Infof("Resource metrics API served on %s to the front proxy (%v), scraping every %s", lis.Addr(), proxies, metricsInterval)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	err = hs.ServeTLS(lis, "", "")
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case rctx.Err() != nil:
		return errRenew
	case errors.Is(err, http.ErrServerClosed):
		err = nil
	}
	return fmt.Errorf("the resource metrics API stopped: %w", err)
}

// waitFrontProxyTrust reads the front proxy's trust (frontProxyTrust),
// asking again every readyInterval while the apiserver refuses it, and
// saying why at once and every 30 s: on a new cluster the reconciler lets
// cairn:metrics read it only once the apiserver is ready, and the metrics
// API dying on the refusal would take a new certificate from the curator
// at each restart (seven in the 24 s it took on a controller of make
// cluster).
func waitFrontProxyTrust(ctx context.Context, cl *apiClient, logf func(string, ...any)) (pool *x509.CertPool, names []string, err error) {
	err = waitUntil(ctx, "the reconciler to allow reading the front proxy's trust", 0, logf, func() (bool, error) {
		var err error
		pool, names, err = frontProxyTrust(ctx, cl)
		return !answered(err, http.StatusForbidden), err
	})
	return pool, names, err
}

// frontProxyTrust reads what the apiserver publishes for aggregated
// apiservers: the front proxy CA and the names its client certificate
// may carry.
func frontProxyTrust(ctx context.Context, cl *apiClient) (*x509.CertPool, []string, error) {
	var auth struct {
		Data map[string]string `json:"data"`
	}
	if err := cl.get(ctx, "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication", &auth); err != nil {
		return nil, nil, fmt.Errorf("when reading the front proxy's trust: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(auth.Data["requestheader-client-ca-file"])) {
		return nil, nil, errors.New("the apiserver publishes no front proxy CA (requestheader-client-ca-file)")
	}
	var names []string
	if err := json.Unmarshal([]byte(auth.Data["requestheader-allowed-names"]), &names); err != nil || len(names) == 0 {
		return nil, nil, fmt.Errorf("the apiserver publishes no front proxy names (requestheader-allowed-names %q): %v", auth.Data["requestheader-allowed-names"], err)
	}
	return pool, names, nil
}

// reviewer asks the apiserver whether a user may read metrics: a
// SubjectAccessReview, which RBAC answers.
type reviewer struct{ cl *apiClient }

func (r reviewer) Allowed(ctx context.Context, req metricsapi.Request) (bool, string, error) {
	review := map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "SubjectAccessReview",
		"spec": map[string]any{
			"user":   req.User,
			"groups": req.Groups,
			"resourceAttributes": map[string]string{
				"verb": req.Verb, "group": metricsapi.Group, "version": metricsapi.Version,
				"resource": req.Resource, "namespace": req.Namespace, "name": req.Name,
			},
		},
	}
	var out struct {
		Status struct {
			Allowed bool   `json:"allowed"`
			Reason  string `json:"reason"`
		} `json:"status"`
	}
	if err := r.cl.do(ctx, http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", review, &out); err != nil {
		return false, "", err
	}
	return out.Status.Allowed, out.Status.Reason, nil
}

// kubeletsOf is the kubelet of each Node that has an internal address,
// by the Node's name, in the order of the names.
func kubeletsOf(nodes map[string]kubeNode, port int) []metricsapi.Kubelet {
	var ks []metricsapi.Kubelet
	for _, n := range nodes {
		if addr := n.internalIPv4(); addr.IsValid() {
			ks = append(ks, metricsapi.Kubelet{Node: n.Metadata.Name, Addr: ports.Join(addr.String(), port)})
		}
	}
	slices.SortFunc(ks, func(a, b metricsapi.Kubelet) int { return strings.Compare(a.Node, b.Node) })
	return ks
}

// selector asks the apiserver which Nodes or pods selectors match.
type selector struct{ cl *apiClient }

func (s selector) Select(ctx context.Context, resource, namespace, labels, fields string) (map[string]bool, error) {
	path := "/api/v1/" + resource
	if namespace != "" {
		path = "/api/v1/namespaces/" + url.PathEscape(namespace) + "/" + resource
	}
	q := url.Values{}
	if labels != "" {
		q.Set("labelSelector", labels)
	}
	if fields != "" {
		q.Set("fieldSelector", fields)
	}
	var out struct {
		Items []struct {
			Metadata objectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := s.cl.get(ctx, path+"?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	matched := map[string]bool{}
	for _, it := range out.Items {
		key := it.Metadata.Name
		if resource == "pods" {
			key = it.Metadata.Namespace + "/" + key
		}
		matched[key] = true
	}
	return matched, nil
}

// metricsObjects are the objects that send metrics.k8s.io to the
// controllers' metrics APIs and let them work: the Service, the
// APIService (trusting the Kubernetes CA kubeCA for the serving
// certificate), and RBAC: cairn:metrics scrapes kubelets, lists Nodes
// and pods for selectors, asks who may read (system:auth-delegator) and
// reads the front proxy's trust; everyone who may view a namespace may
// read its metrics, as with metrics-server.
func metricsObjects(kubeCA []byte) []object {
	svcMeta := managedMeta(metricsService)
	svcMeta["namespace"] = metricsNamespace
	apiMeta := managedMeta(metricsAPIService)
	reader := clusterRole("cairn:aggregated-metrics-reader",
		rule{Group: metricsapi.Group, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list"}})
	labels := reader.body["metadata"].(map[string]any)["labels"].(map[string]string)
	for _, role := range []string{"view", "edit", "admin"} {
		labels["rbac.authorization.k8s.io/aggregate-to-"+role] = "true"
	}
	return []object{
		{
			path: "/api/v1/namespaces/" + metricsNamespace + "/services/" + metricsService,
			body: map[string]any{
				"apiVersion": "v1", "kind": "Service", "metadata": svcMeta,
				"spec": map[string]any{
					"ports": []map[string]any{{"name": "https", "protocol": "TCP", "port": 443, "targetPort": ports.ResourceMetrics}},
				},
			},
		},
		{
			path: "/apis/apiregistration.k8s.io/v1/apiservices/" + metricsAPIService,
			body: map[string]any{
				"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": apiMeta,
				"spec": map[string]any{
					"group": metricsapi.Group, "version": metricsapi.Version,
					"service":              map[string]any{"namespace": metricsNamespace, "name": metricsService, "port": 443},
					"caBundle":             kubeCA,
					"groupPriorityMinimum": 100, "versionPriority": 100,
				},
			},
		},
		clusterRole(MetricsUser,
			rule{Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			rule{Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
		),
		clusterRoleBinding(MetricsUser, MetricsUser, "User", MetricsUser),
		clusterRoleBinding("cairn:metrics:auth-delegator", "system:auth-delegator", "User", MetricsUser),
		roleBinding(metricsNamespace, "cairn:metrics:auth-reader", "extension-apiserver-authentication-reader", "User", MetricsUser),
		reader,
	}
}

// metricsEndpointSlice is the cairn-metrics EndpointSlice: the controllers
// among nodes, at their addresses.
func metricsEndpointSlice(nodes []ClusterNode) object {
	endpoints := []map[string]any{}
	for _, n := range nodes {
		if n.Controller && n.Addr.IsValid() {
			endpoints = append(endpoints, map[string]any{
				"addresses":  []string{n.Addr.String()},
				"conditions": map[string]bool{"ready": true},
			})
		}
	}
	meta := managedMeta(metricsSlice)
	meta["namespace"] = metricsNamespace
	labels := meta["labels"].(map[string]string)
	labels[labelServiceName] = metricsService
	labels["endpointslice.kubernetes.io/managed-by"] = "cairn.dev"
	return object{
		path: "/apis/discovery.k8s.io/v1/namespaces/" + metricsNamespace + "/endpointslices/" + metricsSlice,
		body: map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
			"addressType": "IPv4",
			"endpoints":   endpoints,
			"ports":       []map[string]any{{"name": "https", "protocol": "TCP", "port": ports.ResourceMetrics}},
		},
	}
}

// roleBinding binds the Role role of namespace to one subject of kind.
func roleBinding(namespace, name, role, kind, subject string) object {
	meta := managedMeta(name)
	meta["namespace"] = namespace
	return object{
		path: "/apis/rbac.authorization.k8s.io/v1/namespaces/" + namespace + "/rolebindings/" + name,
		body: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "RoleBinding",
			"metadata":   meta,
			"roleRef":    map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
			"subjects":   []map[string]string{{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}},
		},
	}
}
