package metricsapi

import (
	"fmt"
	"math"
	"time"
)

// GroupVersion is the API this package serves.
const (
	Group        = "metrics.k8s.io"
	Version      = "v1beta1"
	GroupVersion = Group + "/" + Version
)

// The objects of metrics.k8s.io/v1beta1, as kubectl top and the
// HorizontalPodAutoscaler decode them.

type objectMeta struct {
	Name              string `json:"name"`
	Namespace         string `json:"namespace,omitempty"`
	CreationTimestamp string `json:"creationTimestamp"`
}

type resources struct {
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
}

type nodeMetrics struct {
	Kind       string     `json:"kind"`
	APIVersion string     `json:"apiVersion"`
	Metadata   objectMeta `json:"metadata"`
	Timestamp  string     `json:"timestamp"`
	Window     string     `json:"window"`
	Usage      resources  `json:"usage"`
}

type containerMetrics struct {
	Name  string    `json:"name"`
	Usage resources `json:"usage"`
}

type podMetrics struct {
	Kind       string             `json:"kind"`
	APIVersion string             `json:"apiVersion"`
	Metadata   objectMeta         `json:"metadata"`
	Timestamp  string             `json:"timestamp"`
	Window     string             `json:"window"`
	Containers []containerMetrics `json:"containers"`
}

type list[T any] struct {
	Kind       string         `json:"kind"`
	APIVersion string         `json:"apiVersion"`
	Metadata   map[string]any `json:"metadata"`
	Items      []T            `json:"items"`
}

func newList[T any](kind string, items []T) list[T] {
	if items == nil {
		items = []T{}
	}
	return list[T]{Kind: kind, APIVersion: GroupVersion, Metadata: map[string]any{}, Items: items}
}

// resourcesOf formats a usage as quantities: CPU in nanocores, memory in
// bytes.
func resourcesOf(u usage) resources {
	return resources{
		CPU:    fmt.Sprintf("%dn", int64(math.Round(u.cpu*1e9))),
		Memory: fmt.Sprintf("%d", u.memory),
	}
}

// stamp formats a time as Kubernetes does (RFC 3339, to the second).
func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

func nodeMetricsOf(name string, u usage, now time.Time) nodeMetrics {
	return nodeMetrics{
		Kind: "NodeMetrics", APIVersion: GroupVersion,
		Metadata:  objectMeta{Name: name, CreationTimestamp: stamp(now)},
		Timestamp: stamp(u.at), Window: u.window.String(), Usage: resourcesOf(u),
	}
}

// podMetricsOf is the metrics of pod p from its containers' usage: its
// time and window are its earliest container's.
func podMetricsOf(p podKey, cs []containerUsage, now time.Time) podMetrics {
	m := podMetrics{
		Kind: "PodMetrics", APIVersion: GroupVersion,
		Metadata:   objectMeta{Name: p.name, Namespace: p.namespace, CreationTimestamp: stamp(now)},
		Containers: []containerMetrics{},
	}
	var first usage
	for _, c := range cs {
		if first.at.IsZero() || c.at.Before(first.at) {
			first = c.usage
		}
		m.Containers = append(m.Containers, containerMetrics{Name: c.name, Usage: resourcesOf(c.usage)})
	}
	m.Timestamp, m.Window = stamp(first.at), first.window.String()
	return m
}

// apiResourceList is the group version's discovery document.
func apiResourceList() map[string]any {
	verbs := []string{"get", "list"}
	return map[string]any{
		"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GroupVersion,
		"resources": []map[string]any{
			{"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": verbs},
			{"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": verbs},
		},
	}
}

// openAPI is the group's OpenAPI v2 document, without paths. The
// apiserver's aggregator downloads one from every APIService and, when
// it finds none, logs an error and tries again every minute; kubectl top
// needs no schema.
func openAPI() map[string]any {
	return map[string]any{
		"swagger": "2.0",
		"info":    map[string]any{"title": Group, "version": "v1beta1"},
		"paths":   map[string]any{},
	}
}

// status is a Kubernetes Status object: how an apiserver answers an error.
func status(code int, reason, message string) map[string]any {
	return map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "code": code, "reason": reason, "message": message,
	}
}
