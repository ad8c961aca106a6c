package kubernetes

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

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
