package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
)

// A Drainer cordons Nodes and evicts their pods through the Eviction API,
// which honours PodDisruptionBudgets: a cluster rollout drains a worker
// with it before the worker reboots into a new release.
type Drainer struct {
	cl *apiClient
}

// NewDrainer returns a Drainer that calls the apiserver at server
// (https://...) presenting cert, trusting only ca.
func NewDrainer(server string, cert tls.Certificate, ca *x509.CertPool) *Drainer {
	return &Drainer{cl: apiClientWith(server, cert, ca)}
}

// Close drops the Drainer's idle connections.
func (d *Drainer) Close() { d.cl.http.CloseIdleConnections() }

// A DrainRound is what one round of Drain did and left.
type DrainRound struct {
	// Evicted is how many pods the apiserver agreed to evict in this
	// round.
	Evicted int
	// Held is how many pods a disruption budget kept in this round.
	Held int
	// Remaining is how many pods still run on the Node, counting those
	// evicted but not yet gone. DaemonSet pods, and pods that ended, do
	// not count: they stay, or never run again.
	Remaining int
}

// Cordon marks the Node name unschedulable (on) or schedulable again. A
// Node that does not exist is not an error: there is nothing to cordon.
func (d *Drainer) Cordon(ctx context.Context, name string, on bool) error {
	return cordon(ctx, d.cl, name, on)
}

// Drain cordons the Node name and asks once to evict each of its pods
// that Remaining counts and that is not already going. It is called in
// rounds until Remaining is zero: a pod a budget holds is asked again in
// the next round.
func (d *Drainer) Drain(ctx context.Context, name string) (DrainRound, error) {
	var r DrainRound
	if err := cordon(ctx, d.cl, name, true); err != nil {
		return r, err
	}
	pods, err := listPods(ctx, d.cl, name)
	if err != nil {
		return r, err
	}
	for _, p := range pods {
		if p.daemon() || p.ended() {
			continue
		}
		r.Remaining++
		if p.Metadata.DeletionTimestamp != "" {
			continue
		}
		held, err := evict(ctx, d.cl, p.Metadata.Namespace, p.Metadata.Name)
		switch {
		case err != nil:
			return r, err
		case held:
			r.Held++
		default:
			r.Evicted++
		}
	}
	return r, nil
}

// A pod is what draining reads of a pod.
type pod struct {
	Metadata struct {
		Name              string `json:"name"`
		Namespace         string `json:"namespace"`
		DeletionTimestamp string `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string `json:"kind"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// daemon says a DaemonSet runs the pod: it belongs on every node, and its
// controller would put it back at once.
func (p *pod) daemon() bool {
	return slices.ContainsFunc(p.Metadata.OwnerReferences, func(o struct {
		Kind string `json:"kind"`
	}) bool {
		return o.Kind == "DaemonSet"
	})
}

// ended says the pod's containers will not run again.
func (p *pod) ended() bool { return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" }

// cordon sets the Node name's unschedulable to on.
func cordon(ctx context.Context, cl *apiClient, name string, on bool) error {
	body := map[string]any{"spec": map[string]any{"unschedulable": on}}
	err := cl.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", body, nil)
	switch {
	case err == nil, answered(err, http.StatusNotFound):
		return nil
	case on:
		return fmt.Errorf("when cordoning node %s: %w", name, err)
	default:
		return fmt.Errorf("when uncordoning node %s: %w", name, err)
	}
}

// listPods lists the pods bound to the Node name.
func listPods(ctx context.Context, cl *apiClient, name string) ([]pod, error) {
	var pods struct {
		Items []pod `json:"items"`
	}
	if err := cl.get(ctx, "/api/v1/pods?fieldSelector=spec.nodeName%3D"+name, &pods); err != nil {
		return nil, fmt.Errorf("when listing the pods of node %s: %w", name, err)
	}
	return pods.Items, nil
}

// evict asks to evict the pod namespace/name, and reports whether a
// disruption budget holds it. A pod already gone is evicted.
func evict(ctx context.Context, cl *apiClient, namespace, name string) (held bool, err error) {
	eviction := map[string]any{
		"apiVersion": "policy/v1",
		"kind":       "Eviction",
		"metadata":   map[string]string{"name": name, "namespace": namespace},
	}
	path := "/api/v1/namespaces/" + namespace + "/pods/" + name + "/eviction"
	err = cl.do(ctx, http.MethodPost, path, "application/json", eviction, nil)
	switch {
	case err == nil, answered(err, http.StatusNotFound):
		return false, nil
	case answered(err, http.StatusTooManyRequests):
		return true, nil
	default:
		return false, fmt.Errorf("when evicting pod %s/%s: %w", namespace, name, err)
	}
}
