package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"cairn.dev/cairn/node/kubernetes/csiplugin"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// reconcileInterval is how often the reconciler applies its objects again,
// undoing what others changed of them. Each round is a score of
// server-side applies, work for a busy controller's apiserver even when
// nothing changed; a change of the nodes' roles reconciles the Node
// objects at once (reconcileRounds).
const reconcileInterval = 5 * time.Minute

// runReconciler keeps in the cluster the objects Cairn needs (who the owner
// is and what Cairn's own components may do), makes the Node objects
// follow the Cairn nodes' roles (reconcileNodes) and gives each its pod
// range (runPodRanges).
func (c *Controller) runReconciler(ctx context.Context) error {
	dir := c.dir("reconciler")
	cl, cred, err := issueClient(ctx, c.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_RECONCILER, dir, c.apiserverURL())
	if err != nil {
		return err
	}
	lg := supervisor.Logger(ctx)
	rctx, cancel := context.WithDeadlineCause(ctx, cred.renewAt, errRenew)
	defer cancel()
	// The pod ranges are given from when the apiserver serves, not when
	// it is ready: the reconciler's credential (system:masters) needs no
	// RBAC object, and on a new cluster the workers' kubelets register
	// their Nodes, and wait for a range to report them Ready, while the
	// apiserver still makes its default RBAC objects: 61 s from serving
	// to ready in a start of make cluster, its workers' Nodes registered
	// 8 s after it served.
	var ranges *rangeBook
	if c.cfg.Etcd != nil {
		ranges = newRangeBook(c.cfg.Etcd)
		if err := supervisor.Run(rctx, "pod-ranges", func(ctx context.Context) error { return runPodRanges(ctx, cl, ranges) }); err != nil {
			return fmt.Errorf("when starting the pod ranges: %w", err)
		}
	}
	kubeCA, err := os.ReadFile(cred.CA)
	if err != nil {
		return fmt.Errorf("when reading the Kubernetes CA: %w", err)
	}
	if err := supervisor.Run(rctx, "first-pod-objects", func(ctx context.Context) error {
		return runFirstPodObjects(ctx, cl, firstPodObjects(kubeCA))
	}); err != nil {
		return fmt.Errorf("when starting the first pod's objects: %w", err)
	}
	objects := append(clusterObjects(), metricsObjects(kubeCA)...)
	// So are Cairn's cluster roles and their bindings, which need no
	// namespace: the owner's, and those the workers' loops and the
	// metrics API read with, hold the moment the apiserver's default
	// roles exist, not seconds after it is ready, when every component
	// that waited for it asks it at once (in a start of make cluster the
	// owner saw the workers Ready 23 s after it was ready, and each
	// worker's loops were refused meanwhile). The first round applies
	// them again, which changes nothing.
	if err := applyClusterRBAC(ctx, cl, objects, lg.Infof); err != nil {
		return err
	}
	if err := cl.waitReady(ctx, c.cfg.Readiness, lg.Infof); err != nil {
		return err
	}
	if err := supervisor.Run(rctx, "dns-endpoints", func(ctx context.Context) error { return runDNSEndpoints(ctx, cl) }); err != nil {
		return fmt.Errorf("when starting the DNS endpoints: %w", err)
	}
	nodesC := make(chan []ClusterNode)
	event.Pipe(rctx, c.cfg.Nodes, nodesC, event.NotNil[[]ClusterNode]())
	err = reconcileRounds(rctx, cl, objects, nodesC, ranges, reconcileInterval, func() {
		lg.Infof("Applied %d cluster objects", len(objects))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	})
	if rctx.Err() != nil {
		return stopped(ctx)
	}
	return err
}

// applyClusterRBAC applies the cluster roles and cluster role bindings
// among objects, all of them again every readyInterval until the
// apiserver has taken each, or ctx ends.
func applyClusterRBAC(ctx context.Context, cl *apiClient, objects []object, logf func(string, ...any)) error {
	rbac := slices.DeleteFunc(slices.Clone(objects), func(o object) bool { return !strings.HasPrefix(o.path, clusterRBACPrefix) })
	err := waitUntil(ctx, "apiserver "+cl.server+" to take Cairn's cluster roles", 30*time.Second, logf, func() (bool, error) {
		for _, o := range rbac {
			if err := cl.apply(ctx, o.path, o.body); err != nil {
				return false, fmt.Errorf("when applying %s: %w", o.path, err)
			}
		}
		return true, nil
	})
	if err == nil {
		logf("Applied %d cluster roles and bindings", len(rbac))
	}
	return err
}

// reconcileRounds applies objects at once and every interval after, and
// at each list of nodes from nodesC what follows the nodes: the resource
// metrics API's endpoints and the Node objects (reconcileNodes). The
// objects do not follow the nodes, so a new list does not apply them
// again: at a controller's start, when the list changes as each worker
// gets its role and the controller-manager builds its controllers, each
// round of all of them was seconds of an emulated apiserver's time.
// healthy is called once, after the first round. reconcileRounds returns
// the first error that stops a round, or nil once ctx is done.
func reconcileRounds(ctx context.Context, cl *apiClient, objects []object, nodesC <-chan []ClusterNode, ranges *rangeBook, interval time.Duration, healthy func()) error {
	lg := supervisor.Logger(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var nodes []ClusterNode
	objectsDue := true
	for {
		if objectsDue {
			for _, o := range objects {
				if err := cl.apply(ctx, o.path, o.body); err != nil {
					return fmt.Errorf("when applying %s: %w", o.path, err)
				}
			}
			objectsDue = false
		}
		if nodes != nil {
			slice := metricsEndpointSlice(nodes)
			if err := cl.apply(ctx, slice.path, slice.body); err != nil {
				return fmt.Errorf("when applying %s: %w", slice.path, err)
			}
			if err := reconcileNodes(ctx, cl, nodes, ranges, lg.Infof); err != nil {
				// The next round tries again; the objects are in
				// place already.
				lg.Warningf("Reconciling the Node objects: %v", err)
			}
		}
		if healthy != nil {
			healthy()
			healthy = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case nodes = <-nodesC:
		case <-tick.C:
			objectsDue = true
		}
	}
}

// clusterRBACPrefix begins the path of every cluster role and cluster
// role binding.
const clusterRBACPrefix = "/apis/rbac.authorization.k8s.io/v1/cluster"

// An object is a Kubernetes object the reconciler applies at path.
type object struct {
	path string
	body map[string]any
}

// clusterObjects are the objects Cairn keeps in every cluster, those a
// new cluster's owner and Services wait for first: the reconciler applies
// them in this order as soon as the apiserver serves.
//
// The owner and kube-proxy are bound to roles of Cairn's own, not to
// cluster-admin and system:node-proxier, the apiserver's default roles of
// the same rules. A new apiserver makes its default roles one by one
// after it serves, each write slow on a loaded controller: in a start of
// make cluster cluster-admin came 14 s after it served and
// system:node-proxier 25 s, and until then the owner was refused every
// request and each worker's kube-proxy and DNS every list (kube-proxy had
// its Services 31 s after the apiserver served, 17-21 s with Cairn's
// roles).
func clusterObjects() []object {
	return []object{
		// The owner's credentials (cairnctl kubeconfig) are in group
		// cairn:owners, which may do anything, as cluster-admin may.
		clusterRole("cairn:owners",
			rule{Group: "*", Resources: []string{"*"}, Verbs: []string{"*"}},
			rule{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}}),
		clusterRoleBinding("cairn:owners", "cairn:owners", "Group", "cairn:owners"),
		// kube-proxy and each worker's DNS run with their node's
		// kubelet identity, or as cairn:proxy:<node> on a controller
		// that is not a worker (Services), and may do what
		// system:node-proxier may.
		clusterRole("cairn:node-proxier",
			rule{Resources: []string{"services", "endpoints"}, Verbs: []string{"list", "watch"}},
			rule{Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			rule{Group: "discovery.k8s.io", Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			rule{Group: "networking.k8s.io", Resources: []string{"servicecidrs"}, Verbs: []string{"list", "watch"}},
			rule{Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
			rule{Group: "events.k8s.io", Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}}),
		clusterRoleBinding("cairn:node-proxier", "cairn:node-proxier", "Group", "system:nodes"),
		clusterRoleBinding("cairn:proxies", "cairn:node-proxier", "Group", "cairn:proxies"),
		// Each worker routes to the other nodes' pod ranges, which it
		// reads from their Node objects with its kubelet credential;
		// the Node authorizer lets a kubelet read only its own.
		clusterRole("cairn:pod-network", rule{Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}),
		clusterRoleBinding("cairn:pod-network", "cairn:pod-network", "Group", "system:nodes"),
		clusterRoleBinding("cairn:proxies-pod-network", "cairn:pod-network", "Group", "cairn:proxies"),
		// Each worker enforces NetworkPolicy for its pods (runNetworkPolicy),
		// from every policy, namespace and pod, with its kubelet
		// credential.
		clusterRole("cairn:network-policy",
			rule{Resources: []string{"pods", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
			rule{Group: "networking.k8s.io", Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}}),
		clusterRoleBinding("cairn:network-policy", "cairn:network-policy", "Group", "system:nodes"),
		// The apiserver's certificate towards kubelets: logs, exec,
		// port-forward and metrics.
		clusterRoleBinding("cairn:apiserver-kubelet-client", "system:kubelet-api-admin", "User", "cairn:apiserver-kubelet-client"),
		// The cluster DNS (runDNS, runDNSEndpoints).
		dnsServiceObject(),
		// The local volumes' CSI driver (runVolumes), their
		// StorageClass, and what each worker's provisioner may do: it
		// makes and deletes the PersistentVolumes of its node's claims,
		// grows them, gives a claim back to the scheduler when its node
		// has no room, tells the claims' owners with events, and
		// publishes its node's capacity, owned by its Node.
		csiDriverObject(),
		storageClassObject(),
		clusterRole("cairn:volumes",
			rule{Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "delete", "update", "patch"}},
			rule{Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "patch"}},
			rule{Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"update", "patch"}},
			rule{Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			rule{Group: "storage.k8s.io", Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			rule{Group: "storage.k8s.io", Resources: []string{"csistoragecapacities"}, Verbs: []string{"get", "create", "update", "patch"}},
			rule{Resources: []string{"nodes"}, Verbs: []string{"get"}},
		),
		clusterRoleBinding("cairn:volumes", "cairn:volumes", "Group", "cairn:volumes"),
	}
}

// storageClassObject is the StorageClass local, the cluster's default: a
// volume of the node a claim's first pod is scheduled to, growable,
// deleted with its claim.
func storageClassObject() object {
	meta := managedMeta(storageClass)
	meta["annotations"] = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	return object{
		path: "/apis/storage.k8s.io/v1/storageclasses/" + storageClass,
		body: map[string]any{
			"apiVersion":           "storage.k8s.io/v1",
			"kind":                 "StorageClass",
			"metadata":             meta,
			"provisioner":          csiplugin.DriverName,
			"volumeBindingMode":    "WaitForFirstConsumer",
			"allowVolumeExpansion": true,
			"reclaimPolicy":        "Delete",
		},
	}
}

// csiDriverObject is the CSIDriver of local.cairn.dev: nothing to attach
// (a volume is on its node already), no pod information wanted, the
// kubelet gives a volume to a pod's fsGroup, and the scheduler reads the
// workers' CSIStorageCapacity objects (runCapacity).
func csiDriverObject() object {
	return object{
		path: "/apis/storage.k8s.io/v1/csidrivers/" + csiplugin.DriverName,
		body: map[string]any{
			"apiVersion": "storage.k8s.io/v1",
			"kind":       "CSIDriver",
			"metadata":   managedMeta(csiplugin.DriverName),
			"spec": map[string]any{
				"attachRequired":       false,
				"podInfoOnMount":       false,
				"volumeLifecycleModes": []string{"Persistent"},
				"fsGroupPolicy":        "File",
				"storageCapacity":      true,
			},
		},
	}
}

// A rule is one rule of a ClusterRole: on Resources in API group Group
// ("" is the core group), or on NonResourceURLs.
type rule struct {
	Group           string
	Resources       []string
	NonResourceURLs []string
	Verbs           []string
}

// clusterRole is a ClusterRole of rules.
func clusterRole(name string, rules ...rule) object {
	rs := make([]map[string]any, len(rules))
	for i, r := range rules {
		if r.NonResourceURLs != nil {
			rs[i] = map[string]any{"nonResourceURLs": r.NonResourceURLs, "verbs": r.Verbs}
			continue
		}
		rs[i] = map[string]any{"apiGroups": []string{r.Group}, "resources": r.Resources, "verbs": r.Verbs}
	}
	return object{
		path: "/apis/rbac.authorization.k8s.io/v1/clusterroles/" + name,
		body: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "ClusterRole",
			"metadata":   managedMeta(name),
			"rules":      rs,
		},
	}
}

// managedMeta is the metadata of an object the reconciler owns.
func managedMeta(name string) map[string]any {
	return map[string]any{"name": name, "labels": map[string]string{"app.kubernetes.io/managed-by": "cairn"}}
}

// clusterRoleBinding binds role to one subject of kind (User or Group).
func clusterRoleBinding(name, role, kind, subject string) object {
	return object{
		path: "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + name,
		body: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1",
			"kind":       "ClusterRoleBinding",
			"metadata":   managedMeta(name),
			"roleRef":    map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
			"subjects":   []map[string]string{{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}},
		},
	}
}
