package kubernetes

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// zoneFixture is a cluster with a ClusterIP Service, a headless one with
// two ready endpoints (one named, as a StatefulSet's pods are) and one
// not ready, an ExternalName Service, and a ClusterIP Service that was an
// ExternalName one and kept the field.
const zoneFixture = `{
 "services": [
  {"metadata":{"name":"kubernetes","namespace":"default"},"spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],
   "ports":[{"name":"https","protocol":"TCP","port":443}]}},
  {"metadata":{"name":"db","namespace":"shop"},"spec":{"type":"ClusterIP","clusterIP":"None",
   "ports":[{"name":"pg","protocol":"TCP","port":5432}]}},
  {"metadata":{"name":"search","namespace":"shop"},"spec":{"type":"ExternalName","externalName":"search.example.com"}},
  {"metadata":{"name":"cart","namespace":"shop"},"spec":{"type":"ClusterIP","clusterIP":"10.96.7.7","clusterIPs":["10.96.7.7"],"externalName":"cart.example.com",
   "ports":[{"name":"http","protocol":"TCP","port":80}]}}
 ],
 "slices": [
  {"metadata":{"name":"db-x1","namespace":"shop","labels":{"kubernetes.io/service-name":"db"}},"addressType":"IPv4",
   "endpoints":[
    {"addresses":["10.192.1.7"],"hostname":"db-0","conditions":{"ready":true}},
    {"addresses":["10.192.2.9"],"conditions":{"ready":true}},
    {"addresses":["10.192.3.3"],"hostname":"db-2","conditions":{"ready":false}}],
   "ports":[{"name":"pg","protocol":"TCP","port":5432}]},
  {"metadata":{"name":"kubernetes","namespace":"default","labels":{"kubernetes.io/service-name":"kubernetes"}},"addressType":"IPv4",
   "endpoints":[{"addresses":["10.42.0.10"],"conditions":{"ready":true}}],"ports":[{"name":"https","protocol":"TCP","port":6443}]}
 ]
}`

func testZone(t *testing.T) *clusterZone {
	t.Helper()
	var f struct {
		Services []json.RawMessage `json:"services"`
		Slices   []json.RawMessage `json:"slices"`
	}
	if err := json.Unmarshal([]byte(zoneFixture), &f); err != nil {
		t.Fatal(err)
	}
	services := map[string]service{}
	for _, raw := range f.Services {
		key, s, err := decodeObject[service](raw)
		if err != nil {
			t.Fatal(err)
		}
		services[key] = s
	}
	eps := map[string]endpointSlice{}
	for _, raw := range f.Slices {
		key, s, err := decodeObject[endpointSlice](raw)
		if err != nil {
			t.Fatal(err)
		}
		eps[key] = s
	}
	return newClusterZone(ClusterDomain, services, eps)
}

// records writes an answer's records as "TYPE value" lines, sorted.
func records(rs []dnsmessage.Resource) []string {
	var out []string
	for _, r := range rs {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, "A "+netip.AddrFrom4(b.A).String())
		case *dnsmessage.CNAMEResource:
			out = append(out, "CNAME "+b.CNAME.String())
		case *dnsmessage.SRVResource:
			out = append(out, fmt.Sprintf("SRV %d %s", b.Port, b.Target))
		case *dnsmessage.PTRResource:
			out = append(out, "PTR "+b.PTR.String())
		case *dnsmessage.SOAResource:
			out = append(out, "SOA "+b.NS.String())
		default:
			out = append(out, r.Header.Type.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestClusterZone(t *testing.T) {
	z := testZone(t)
	const (
		A   = dnsmessage.TypeA
		SRV = dnsmessage.TypeSRV
	)
	nx := dnsmessage.RCodeNameError
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{"kubernetes.default.svc.cluster.local.", A, 0, []string{"A 10.96.0.1"}},
		{"KUBERNETES.Default.SVC.cluster.local.", A, 0, []string{"A 10.96.0.1"}},
		{"kubernetes.default.svc.cluster.local.", dnsmessage.TypeAAAA, 0, nil},
		{"db.shop.svc.cluster.local.", A, 0, []string{"A 10.192.1.7", "A 10.192.2.9"}},
		{"db-0.db.shop.svc.cluster.local.", A, 0, []string{"A 10.192.1.7"}},
		{"10-192-2-9.db.shop.svc.cluster.local.", A, 0, []string{"A 10.192.2.9"}},
		{"db-2.db.shop.svc.cluster.local.", A, nx, nil},
		{"search.shop.svc.cluster.local.", A, 0, []string{"CNAME search.example.com."}},
		// Made a ClusterIP Service, an ExternalName one kept its name.
		{"cart.shop.svc.cluster.local.", A, 0, []string{"A 10.96.7.7"}},
		{"_https._tcp.kubernetes.default.svc.cluster.local.", SRV, 0, []string{"SRV 443 kubernetes.default.svc.cluster.local."}},
		{"_pg._tcp.db.shop.svc.cluster.local.", SRV, 0, []string{"SRV 5432 10-192-2-9.db.shop.svc.cluster.local.", "SRV 5432 db-0.db.shop.svc.cluster.local."}},
		{"_pg._udp.db.shop.svc.cluster.local.", SRV, nx, nil},
		{"10-192-4-5.shop.pod.cluster.local.", A, 0, []string{"A 10.192.4.5"}},
		{"10-192-4.shop.pod.cluster.local.", A, nx, nil},
		{"nothing.default.svc.cluster.local.", A, nx, nil},
		// A search-path expansion of an outside name.
		{"registry.cairn.test.default.svc.cluster.local.", A, nx, nil},
		{"shop.svc.cluster.local.", A, 0, nil},
		{"nobody.svc.cluster.local.", A, nx, nil},
		{"svc.cluster.local.", A, 0, nil},
		{"cluster.local.", dnsmessage.TypeSOA, 0, []string{"SOA ns.dns.cluster.local."}},
		{"other.cluster.local.", A, nx, nil},
	} {
		q := dnsmessage.Question{Name: dnsmessage.MustNewName(c.name), Type: c.typ, Class: dnsmessage.ClassINET}
		a, ok := z.answer(q)
		if !ok {
			t.Errorf("%s %s: not in the zone", c.name, c.typ)
			continue
		}
		if got := records(a.Records); a.RCode != c.rcode || !slices.Equal(got, c.want) {
			t.Errorf("%s %s = %v %v, want %v %v", c.name, c.typ, a.RCode, got, c.rcode, c.want)
		}
		if len(a.Records) == 0 && a.Authority == nil {
			t.Errorf("%s %s: an answer without records carries no SOA", c.name, c.typ)
		}
	}
	for _, name := range []string{"registry.cairn.test.", "local.", "xcluster.local."} {
		q := dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: A, Class: dnsmessage.ClassINET}
		if _, ok := z.answer(q); ok {
			t.Errorf("%s is answered by the cluster zone; want it forwarded", name)
		}
	}
}

// TestClusterZoneReverse checks the PTR records of cluster IPs and of
// headless Services' ready endpoints, and that every other reverse name
// is left to the upstream resolvers.
func TestClusterZoneReverse(t *testing.T) {
	z := testZone(t)
	for _, c := range []struct {
		name string
		typ  dnsmessage.Type
		want []string
	}{
		{"1.0.96.10.in-addr.arpa.", dnsmessage.TypePTR, []string{"PTR kubernetes.default.svc.cluster.local."}},
		{"1.0.96.10.IN-ADDR.ARPA.", dnsmessage.TypePTR, []string{"PTR kubernetes.default.svc.cluster.local."}},
		{"7.1.192.10.in-addr.arpa.", dnsmessage.TypePTR, []string{"PTR db-0.db.shop.svc.cluster.local."}},
		{"9.2.192.10.in-addr.arpa.", dnsmessage.TypePTR, []string{"PTR 10-192-2-9.db.shop.svc.cluster.local."}},
		// A name the zone holds, asked for another type: no records.
		{"1.0.96.10.in-addr.arpa.", dnsmessage.TypeA, nil},
	} {
		q := dnsmessage.Question{Name: dnsmessage.MustNewName(c.name), Type: c.typ, Class: dnsmessage.ClassINET}
		a, ok := z.answer(q)
		if !ok {
			t.Errorf("%s %s: not in the zone", c.name, c.typ)
			continue
		}
		if got := records(a.Records); a.RCode != dnsmessage.RCodeSuccess || !slices.Equal(got, c.want) {
			t.Errorf("%s %s = %v %v, want %v", c.name, c.typ, a.RCode, got, c.want)
		}
	}
	for _, name := range []string{
		"3.3.192.10.in-addr.arpa.", // an endpoint that is not ready
		"10.0.42.10.in-addr.arpa.", // the endpoint of a Service with a cluster IP
		"99.0.96.10.in-addr.arpa.", // an address no Service has
		"0.96.10.in-addr.arpa.",    // not a whole address
		"1.0.96.010.in-addr.arpa.", // not an address
		"in-addr.arpa.",
	} {
		q := dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET}
		if a, ok := z.answer(q); ok {
			t.Errorf("%s PTR is answered by the cluster zone (%v); want it forwarded", name, records(a.Records))
		}
	}
}

// TestDNSStateUntilListed checks that the cluster's names are answered
// SERVFAIL, not "no such name", until Services and EndpointSlices were
// both read, and that outside names are forwarded all along.
func TestDNSStateUntilListed(t *testing.T) {
	st := &dnsState{}
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("kubernetes.default.svc.cluster.local."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	outside := dnsmessage.Question{Name: dnsmessage.MustNewName("example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	check := func(when string, rcode dnsmessage.RCode, want []string) {
		t.Helper()
		a, ok := st.answer(q)
		if got := records(a.Records); !ok || a.RCode != rcode || !slices.Equal(got, want) {
			t.Errorf("%s: %v %v (in zone %v), want %v %v", when, a.RCode, got, ok, rcode, want)
		}
		if _, ok := st.answer(outside); ok {
			t.Errorf("%s: example.com is answered, not forwarded", when)
		}
	}
	check("before any list", dnsmessage.RCodeServerFailure, nil)
	svc := service{Metadata: objectMeta{Name: "kubernetes", Namespace: "default"}}
	svc.Spec.ClusterIP = "10.96.0.1"
	st.setServices(map[string]service{"default/kubernetes": svc})
	check("with Services only", dnsmessage.RCodeServerFailure, nil)
	st.setEndpointSlices(map[string]endpointSlice{})
	check("with both", dnsmessage.RCodeSuccess, []string{"A 10.96.0.1"})
}

func TestUpstreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := strings.Join([]string{
		"# written by DHCP",
		"nameserver 10.42.0.1",
		"nameserver 10.96.0.10",
		"nameserver 10.42.0.11",
		"nameserver 127.0.0.53",
		"nameserver bogus",
		"nameserver 192.0.2.53",
		"search example.com",
	}, "\n")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got := upstreams(path, netip.MustParseAddr("10.42.0.11"))
	want := []netip.AddrPort{netip.MustParseAddrPort("10.42.0.1:53"), netip.MustParseAddrPort("192.0.2.53:53")}
	if !slices.Equal(got, want) {
		t.Errorf("upstreams = %v, want %v (no cluster DNS, self or loopback)", got, want)
	}
	if got := upstreams(filepath.Join(t.TempDir(), "none"), netip.Addr{}); got != nil {
		t.Errorf("upstreams of a missing file = %v, want none", got)
	}
}

func TestDNSEndpointSlice(t *testing.T) {
	var nodes map[string]kubeNode
	err := json.Unmarshal([]byte(`{
	 "/cairn-b": {"metadata":{"name":"cairn-b"},"status":{"addresses":[{"type":"Hostname","address":"b"},{"type":"InternalIP","address":"10.42.0.12"}],
	   "conditions":[{"type":"Ready","status":"False"}]}},
	 "/cairn-a": {"metadata":{"name":"cairn-a"},"status":{"addresses":[{"type":"InternalIP","address":"10.42.0.11"}],
	   "conditions":[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"True"}]}},
	 "/cairn-c": {"metadata":{"name":"cairn-c"},"status":{}}
	}`), &nodes)
	if err != nil {
		t.Fatal(err)
	}
	slice, ready := dnsEndpointSlice(nodes)
	b, _ := json.Marshal(slice["endpoints"])
	want := `[{"addresses":["10.42.0.11"],"conditions":{"ready":true},"hints":{"forNodes":[{"name":"cairn-a"}]},"nodeName":"cairn-a"},` +
		`{"addresses":["10.42.0.12"],"conditions":{"ready":false},"hints":{"forNodes":[{"name":"cairn-b"}]},"nodeName":"cairn-b"}]`
	if string(b) != want || ready != 1 {
		t.Errorf("endpoints = %s (%d ready)\nwant %s (1 ready)", b, ready, want)
	}
	if l := slice["metadata"].(map[string]any)["labels"].(map[string]string); l[labelServiceName] != dnsService {
		t.Errorf("slice labels %v do not name Service %s", l, dnsService)
	}
}
