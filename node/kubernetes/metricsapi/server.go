package metricsapi

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// A Request is what a user asked of the API, for the Authorizer.
type Request struct {
	User   string
	Groups []string
	// Verb is get or list; Resource nodes or pods; Namespace empty for
	// nodes and for the pods of every namespace; Name empty for a list.
	Verb, Resource, Namespace, Name string
}

// An Authorizer decides whether the user of a request may make it. The
// cluster's apiserver decides (a SubjectAccessReview), so that RBAC says
// who may read metrics as it says everything else.
type Authorizer interface {
	Allowed(ctx context.Context, r Request) (allowed bool, reason string, err error)
}

// A Selector tells which objects a label and a field selector match, as
// the apiserver tells: the nodes by name, or the pods of namespace (all
// of them for "") as namespace/name.
type Selector interface {
	Select(ctx context.Context, resource, namespace, labelSelector, fieldSelector string) (map[string]bool, error)
}

// A Server answers metrics.k8s.io/v1beta1 from its store, to the requests
// the cluster's apiserver proxies to it as the aggregation layer's front
// proxy.
type Server struct {
	store *store
	authz Authorizer
	sel   Selector
	// proxies are the names the front proxy's certificate may carry.
	proxies  []string
	kubelets *http.Client
	interval time.Duration
	now      func() time.Time
}

// TLSConfig is the server's TLS configuration: it presents cert and
// verifies the client certificates of frontProxyCA (Server checks that
// there is one, and whose).
func TLSConfig(cert tls.Certificate, frontProxyCA *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    frontProxyCA,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
}

// Handler routes the group version's discovery, its OpenAPI document and
// its resources. Discovery and OpenAPI answer anyone (the apiserver reads
// them as no user); the rest only requests of the front proxy that the
// Authorizer allows.
func (s *Server) Handler() http.Handler {
	prefix := "/apis/" + GroupVersion
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+prefix, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, apiResourceList())
	})
	mux.HandleFunc("GET /openapi/v2", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, openAPI())
	})
	mux.HandleFunc("GET "+prefix+"/nodes", s.serve("nodes", s.nodes))
	mux.HandleFunc("GET "+prefix+"/nodes/{name}", s.serve("nodes", s.nodes))
	mux.HandleFunc("GET "+prefix+"/pods", s.serve("pods", s.pods))
	mux.HandleFunc("GET "+prefix+"/namespaces/{namespace}/pods", s.serve("pods", s.pods))
	mux.HandleFunc("GET "+prefix+"/namespaces/{namespace}/pods/{name}", s.serve("pods", s.pods))
	return mux
}

// A query is one authorized request of a resource.
type query struct {
	namespace, name string
	// selected is what the request's selectors match; nil without any.
	selected map[string]bool
}

// serve authenticates and authorizes a request of resource, resolves its
// selectors and hands it to answer.
func (s *Server) serve(resource string, answer func(http.ResponseWriter, query)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, groups, err := proxiedUser(r, s.proxies)
		if err != nil {
			writeJSON(w, http.StatusUnauthorized, status(http.StatusUnauthorized, "Unauthorized", err.Error()))
			return
		}
		q := query{namespace: r.PathValue("namespace"), name: r.PathValue("name")}
		verb := "list"
		if q.name != "" {
			verb = "get"
		}
		if watch, _ := strconv.ParseBool(r.URL.Query().Get("watch")); watch {
			writeJSON(w, http.StatusMethodNotAllowed, status(http.StatusMethodNotAllowed, "MethodNotAllowed",
				resource+"."+Group+" cannot be watched: metrics are read again each time"))
			return
		}
		req := Request{User: user, Groups: groups, Verb: verb, Resource: resource, Namespace: q.namespace, Name: q.name}
		allowed, reason, err := s.authz.Allowed(r.Context(), req)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, status(http.StatusInternalServerError, "InternalError",
				fmt.Sprintf("when authorizing %s %s of %s: %v", verb, resource, user, err)))
			return
		}
		if !allowed {
			writeJSON(w, http.StatusForbidden, status(http.StatusForbidden, "Forbidden", forbidden(req, reason)))
			return
		}
		labels, fields := r.URL.Query().Get("labelSelector"), r.URL.Query().Get("fieldSelector")
		if labels != "" || fields != "" {
			q.selected, err = s.sel.Select(r.Context(), resource, q.namespace, labels, fields)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, "BadRequest",
					fmt.Sprintf("when selecting %s: %v", resource, err)))
				return
			}
		}
		answer(w, q)
	}
}

// forbidden words a refusal as the apiserver does.
func forbidden(r Request, reason string) string {
	scope := "at the cluster scope"
	if r.Namespace != "" {
		scope = fmt.Sprintf("in the namespace %q", r.Namespace)
	}
	msg := fmt.Sprintf("%s.%s is forbidden: User %q cannot %s resource %q in API group %q %s",
		r.Resource, Group, r.User, r.Verb, r.Resource, Group, scope)
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}

// proxiedUser returns the user the front proxy speaks for: the request
// must come with a verified client certificate (TLSConfig) carrying one
// of the proxies' names, and name a user.
func proxiedUser(r *http.Request, proxies []string) (string, []string, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return "", nil, errors.New("no client certificate of the front proxy CA")
	}
	if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; !slices.Contains(proxies, cn) {
		return "", nil, fmt.Errorf("the client certificate of %q is not the front proxy's", cn)
	}
	user := r.Header.Get("X-Remote-User")
	if user == "" {
		return "", nil, errors.New("the front proxy named no user")
	}
	return user, r.Header.Values("X-Remote-Group"), nil
}

// nodes answers NodeMetrics: one by name, or the list.
func (s *Server) nodes(w http.ResponseWriter, q query) {
	now := s.now()
	all := s.store.nodeUsage()
	if q.name != "" {
		u, ok := all[q.name]
		if !ok || (q.selected != nil && !q.selected[q.name]) {
			writeJSON(w, http.StatusNotFound, status(http.StatusNotFound, "NotFound", fmt.Sprintf("nodemetrics.%s %q not found", Group, q.name)))
			return
		}
		writeJSON(w, http.StatusOK, nodeMetricsOf(q.name, u, now))
		return
	}
	var items []nodeMetrics
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if q.selected == nil || q.selected[name] {
			items = append(items, nodeMetricsOf(name, all[name], now))
		}
	}
	writeJSON(w, http.StatusOK, newList("NodeMetricsList", items))
}

// pods answers PodMetrics: one by namespace and name, or the list of a
// namespace or of all.
func (s *Server) pods(w http.ResponseWriter, q query) {
	now := s.now()
	all := s.store.podUsage()
	if q.name != "" {
		p := podKey{q.namespace, q.name}
		cs, ok := all[p]
		if !ok || (q.selected != nil && !q.selected[q.namespace+"/"+q.name]) {
			writeJSON(w, http.StatusNotFound, status(http.StatusNotFound, "NotFound", fmt.Sprintf("podmetrics.%s %q not found", Group, q.name)))
			return
		}
		writeJSON(w, http.StatusOK, podMetricsOf(p, cs, now))
		return
	}
	keys := make([]podKey, 0, len(all))
	for p := range all {
		if (q.namespace == "" || p.namespace == q.namespace) && (q.selected == nil || q.selected[p.namespace+"/"+p.name]) {
			keys = append(keys, p)
		}
	}
	slices.SortFunc(keys, func(a, b podKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	items := make([]podMetrics, 0, len(keys))
	for _, p := range keys {
		items = append(items, podMetricsOf(p, all[p], now))
	}
	writeJSON(w, http.StatusOK, newList("PodMetricsList", items))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
