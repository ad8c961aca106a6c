package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/supervisor"
)

// The kube-dns Service: the cluster DNS at ClusterDNS, under the name
// and label that tools look for. It has no selector: its endpoints are
// the workers' own DNS servers (runDNS), in an EndpointSlice the
// reconciler keeps.
const (
	dnsNamespace = "kube-system"
	dnsService   = "kube-dns"
	dnsSlice     = "kube-dns-cairn"
)

// dnsServiceObject is the kube-dns Service. PreferSameNode and the node
// hints of its endpoints keep each node's queries on the node, and send
// them to another node's DNS while the node's own is not ready.
func dnsServiceObject() object {
	meta := managedMeta(dnsService)
	meta["namespace"] = dnsNamespace
	meta["labels"].(map[string]string)["k8s-app"] = "kube-dns"
	return object{
		path: "/api/v1/namespaces/" + dnsNamespace + "/services/" + dnsService,
		body: map[string]any{
			"apiVersion": "v1",
			"kind":       "Service",
			"metadata":   meta,
			"spec": map[string]any{
				"clusterIP":           ClusterDNS,
				"trafficDistribution": "PreferSameNode",
				"ports": []map[string]any{
					{"name": "dns", "protocol": "UDP", "port": ports.ClusterDNS, "targetPort": ports.ClusterDNS},
					{"name": "dns-tcp", "protocol": "TCP", "port": ports.ClusterDNS, "targetPort": ports.ClusterDNS},
				},
			},
		},
	}
}

// A kubeNode is what Cairn reads of a Node object: its pod range (the
// pod network), its addresses and conditions (the DNS endpoints).
type kubeNode struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		PodCIDR string `json:"podCIDR"`
	} `json:"spec"`
	Status struct {
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses"`
		Conditions []nodeCondition `json:"conditions"`
	} `json:"status"`
}

// internalIPv4 is the Node's IPv4 InternalIP address, the node's own;
// invalid when it has none.
func (n kubeNode) internalIPv4() netip.Addr {
	var addr netip.Addr
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == "InternalIP" && ip.Is4() {
			addr = ip
		}
	}
	return addr
}

// A nodeCondition is one of a Node's status conditions.
type nodeCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// runDNSEndpoints keeps the kube-dns EndpointSlice: one endpoint per Node,
// at its internal address, ready when the Node is, hinted for that node.
// It follows the Node objects, so a new worker's DNS is used as soon as
// its Node is.
func runDNSEndpoints(ctx context.Context, cl *apiClient) error {
	lg := supervisor.Logger(ctx)
	path := "/apis/discovery.k8s.io/v1/namespaces/" + dnsNamespace + "/endpointslices/" + dnsSlice
	var last []byte
	return follow(ctx, cl, "/api/v1/nodes", healthyAfter(ctx, func(nodes map[string]kubeNode) error {
		slice, ready := dnsEndpointSlice(nodes)
		b, err := json.Marshal(slice)
		if err != nil {
			return fmt.Errorf("when encoding the DNS endpoints: %w", err)
		}
		if string(b) == string(last) {
			return nil
		}
		if err := cl.apply(ctx, path, slice); err != nil {
			return fmt.Errorf("when applying the DNS endpoints: %w", err)
		}
		last = b
		lg.Infof("Cluster DNS endpoints: %d nodes, %d ready", len(slice["endpoints"].([]map[string]any)), ready)
		return nil
	}))
}

// dnsEndpointSlice is the kube-dns EndpointSlice for nodes, and how many
// of its endpoints are ready.
func dnsEndpointSlice(nodes map[string]kubeNode) (map[string]any, int) {
	names := slices.Sorted(maps.Keys(nodes))
	endpoints := []map[string]any{}
	ready := 0
	for _, k := range names {
		n := nodes[k]
		addr := n.internalIPv4()
		if !addr.IsValid() {
			continue
		}
		isReady := slices.Contains(n.Status.Conditions, nodeCondition{Type: "Ready", Status: "True"})
		if isReady {
			ready++
		}
		endpoints = append(endpoints, map[string]any{
			"addresses":  []string{addr.String()},
			"conditions": map[string]bool{"ready": isReady},
			"nodeName":   n.Metadata.Name,
			"hints":      map[string]any{"forNodes": []map[string]string{{"name": n.Metadata.Name}}},
		})
	}
	meta := managedMeta(dnsSlice)
	meta["namespace"] = dnsNamespace
	labels := meta["labels"].(map[string]string)
	labels[labelServiceName] = dnsService
	labels["endpointslice.kubernetes.io/managed-by"] = "cairn.dev"
	return map[string]any{
		"apiVersion":  "discovery.k8s.io/v1",
		"kind":        "EndpointSlice",
		"metadata":    meta,
		"addressType": "IPv4",
		"endpoints":   endpoints,
		"ports": []map[string]any{
			{"name": "dns", "protocol": "UDP", "port": ports.ClusterDNS},
			{"name": "dns-tcp", "protocol": "TCP", "port": ports.ClusterDNS},
		},
	}, ready
}
