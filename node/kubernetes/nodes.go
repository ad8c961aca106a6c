package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// A ClusterNode is a Cairn node as the reconciler sees it: an UP node and
// its Kubernetes roles.
type ClusterNode struct {
	ID         string
	Controller bool
	Worker     bool
	// Addr is the node's address in the cluster.
	Addr netip.Addr
}

// Role labels of Node objects, which follow the nodes' Cairn roles. The
// kubelet may not set them itself (NodeRestriction), so the reconciler
// does.
const (
	labelControlPlane = "node-role.kubernetes.io/control-plane"
	labelWorker       = "node-role.kubernetes.io/worker"
	// cairnNodePrefix starts every Cairn node ID, which is the node's
	// Kubernetes name.
	cairnNodePrefix = "cairn-"
)

// reconcileNodes makes the Node objects agree with nodes, the UP nodes of
// the cluster: role labels follow the roles, and the Node of a Cairn node
// that does not hold KubernetesWorker any more (or left the cluster) is
// cordoned, its pods evicted and the Node deleted, so that they run
// elsewhere; its pod range is freed in ranges (when not nil) once the Node
// is gone. Node objects whose name is not a Cairn node ID are left alone.
func reconcileNodes(ctx context.Context, cl *apiClient, nodes []ClusterNode, ranges *rangeBook, logf func(string, ...any)) error {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := cl.get(ctx, "/api/v1/nodes", &list); err != nil {
		return err
	}
	var errs []error
	listed := map[string]bool{}
	for _, item := range list.Items {
		name := item.Metadata.Name
		listed[name] = true
		if !strings.HasPrefix(name, cairnNodePrefix) {
			continue
		}
		i := slices.IndexFunc(nodes, func(n ClusterNode) bool { return n.ID == name })
		if i < 0 || !nodes[i].Worker {
			if err := removeNode(ctx, cl, name, logf); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		want := map[string]bool{labelControlPlane: nodes[i].Controller, labelWorker: nodes[i].Worker}
		patch := map[string]any{}
		for label, on := range want {
			_, has := item.Metadata.Labels[label]
			switch {
			case on && !has:
				patch[label] = ""
			case !on && has:
				patch[label] = nil
			}
		}
		if len(patch) == 0 {
			continue
		}
		body := map[string]any{"metadata": map[string]any{"labels": patch}}
		if err := cl.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", body, nil); err != nil {
			errs = append(errs, fmt.Errorf("when labelling node %s: %w", name, err))
			continue
		}
		logf("Node %s labelled for its roles: %v", name, patch)
	}
	if ranges != nil {
		// The list's resource version is the etcd revision it was
		// read at: the apiserver keeps its objects in the same etcd.
		rev, err := strconv.ParseInt(list.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("when reading the Node list's resource version %q: %w", list.Metadata.ResourceVersion, err))
		} else if err := ranges.releaseGone(ctx, rev, listed, nodes, logf); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNode cordons the Node name, evicts its pods (those a disruption
// budget protects stay until the next round) and deletes it once none is
// left.
func removeNode(ctx context.Context, cl *apiClient, name string, logf func(string, ...any)) error {
	if err := cordon(ctx, cl, name, true); err != nil {
		return err
	}
	pods, err := listPods(ctx, cl, name)
	if err != nil {
		return err
	}
	left := 0
	for _, p := range pods {
		if p.daemon() {
			continue
		}
		held, err := evict(ctx, cl, p.Metadata.Namespace, p.Metadata.Name)
		if err != nil {
			return err
		}
		if held {
			// A disruption budget holds it: try again next round.
			left++
		}
	}
	if left > 0 {
		logf("Node %s lost KubernetesWorker: %d pods wait for their disruption budget", name, left)
		return nil
	}
	err = cl.do(ctx, http.MethodDelete, "/api/v1/nodes/"+name, "", nil, nil)
	if err != nil && !answered(err, http.StatusNotFound) {
		return fmt.Errorf("when deleting node %s: %w", name, err)
	}
	logf("Node %s deleted: it does not hold KubernetesWorker", name)
	return nil
}
