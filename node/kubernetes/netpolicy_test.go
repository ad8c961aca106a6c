package kubernetes

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// policyCluster is a cluster in JSON: its pods (with their node, labels,
// address and named ports), namespaces and policies, as the apiserver
// would list them.
type policyCluster struct {
	pods       map[string]policyPod
	namespaces map[string]kubeNamespace
	policies   map[string]networkPolicy
}

func decodeInto[T followed](t *testing.T, into map[string]T, docs ...string) {
	t.Helper()
	for _, d := range docs {
		key, obj, err := decodeObject[T](json.RawMessage(d))
		if err != nil {
			t.Fatalf("decoding %s: %v", d, err)
		}
		into[key] = obj
	}
}

// newPolicyCluster has, on node "me": web (app=web, port http 8080, in
// shop), db (app=db, UDP port dns 53, in shop), done (finished, in shop),
// host (host network, in shop); on node "other": client (role=client, in
// shop) and probe (role=client, in ops, whose namespace is team=ops).
func newPolicyCluster(t *testing.T) *policyCluster {
	c := &policyCluster{pods: map[string]policyPod{}, namespaces: map[string]kubeNamespace{}, policies: map[string]networkPolicy{}}
	decodeInto(t, c.pods,
		`{"metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},
		  "spec":{"nodeName":"me","containers":[{"ports":[{"name":"http","containerPort":8080}]}]},
		  "status":{"phase":"Running","podIPs":[{"ip":"10.192.0.2"}]}}`,
		`{"metadata":{"name":"db","namespace":"shop","labels":{"app":"db"}},
		  "spec":{"nodeName":"me","containers":[{"ports":[{"name":"dns","containerPort":53,"protocol":"UDP"}]}]},
		  "status":{"phase":"Running","podIPs":[{"ip":"10.192.0.3"}]}}`,
		`{"metadata":{"name":"done","namespace":"shop","labels":{"app":"web"}},
		  "spec":{"nodeName":"me"},"status":{"phase":"Succeeded","podIPs":[{"ip":"10.192.0.9"}]}}`,
		`{"metadata":{"name":"host","namespace":"shop","labels":{"app":"web"}},
		  "spec":{"nodeName":"me","hostNetwork":true},"status":{"phase":"Running","podIPs":[{"ip":"10.42.0.11"}]}}`,
		`{"metadata":{"name":"client","namespace":"shop","labels":{"role":"client"}},
		  "spec":{"nodeName":"other","containers":[{"ports":[{"name":"http","containerPort":9090}]}]},
		  "status":{"phase":"Running","podIPs":[{"ip":"10.192.1.5"}]}}`,
		`{"metadata":{"name":"probe","namespace":"ops","labels":{"role":"client"}},
		  "spec":{"nodeName":"other"},"status":{"phase":"Running","podIPs":[{"ip":"10.192.1.6"}]}}`,
	)
	decodeInto(t, c.namespaces,
		`{"metadata":{"name":"shop","labels":{"kubernetes.io/metadata.name":"shop"}}}`,
		`{"metadata":{"name":"ops","labels":{"kubernetes.io/metadata.name":"ops","team":"ops"}}}`,
	)
	return c
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// one is the range of a single address.
func one(s string) ipRange { return ipRange{ip(s), ip(s)} }

func tcp(from, to uint16) portRange { return portRange{Proto: 6, From: from, To: to} }

func TestPolicyRules(t *testing.T) {
	web, db := ip("10.192.0.2"), ip("10.192.0.3")
	for _, tc := range []struct {
		name     string
		policies []string
		want     []podPolicy
	}{{
		name: "no policy isolates nothing",
	}, {
		name: "default deny ingress in the namespace",
		policies: []string{`{"metadata":{"name":"deny","namespace":"shop"},
			"spec":{"podSelector":{},"policyTypes":["Ingress"]}}`},
		want: []podPolicy{
			{Pod: "shop/web", IP: web, Ingress: []allow{}},
			{Pod: "shop/db", IP: db, Ingress: []allow{}},
		},
	}, {
		name: "a policy of another namespace selects none of its pods",
		policies: []string{`{"metadata":{"name":"deny","namespace":"ops"},
			"spec":{"podSelector":{},"policyTypes":["Ingress","Egress"]}}`},
	}, {
		name: "allow the clients of the namespace on a named port",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchLabels":{"app":"web"}},
			"ingress":[{"from":[{"podSelector":{"matchLabels":{"role":"client"}}}],"ports":[{"port":"http"}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web,
			Ingress: []allow{{Peers: []ipRange{one("10.192.1.5")}, Ports: []portRange{tcp(8080, 8080)}}}}},
	}, {
		name: "a named port the pod lacks allows nothing",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchLabels":{"app":"web"}},
			"ingress":[{"ports":[{"port":"metrics"}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web, Ingress: []allow{}}},
	}, {
		name: "namespace and pod selector in one peer: both must match",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchLabels":{"app":"web"}},
			"ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"team":"ops"}},"podSelector":{"matchLabels":{"role":"client"}}}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web,
			Ingress: []allow{{Peers: []ipRange{one("10.192.1.6")}}}}},
	}, {
		name: "namespace selector alone: every pod of those namespaces",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchExpressions":[{"key":"app","operator":"In","values":["web"]}]},
			"ingress":[{"from":[{"namespaceSelector":{}}],"ports":[{"protocol":"TCP","port":80,"endPort":90}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web, Ingress: []allow{{
			// In the order of the pods' keys.
			Peers: []ipRange{one("10.192.1.6"), one("10.192.1.5"), one("10.192.0.3"), one("10.192.0.2")},
			Ports: []portRange{tcp(80, 90)}}}}},
	}, {
		name: "ip block with except",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchExpressions":[{"key":"app","operator":"NotIn","values":["db"]}]},
			"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.192.0.0/16","10.255.255.255/32"]}}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web, Ingress: []allow{{Peers: []ipRange{
			{ip("10.0.0.0"), ip("10.191.255.255")}, {ip("10.193.0.0"), ip("10.255.255.254")}}}}}},
	}, {
		name: "a selector that selects no pod allows nothing",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchLabels":{"app":"web"}},
			"ingress":[{"from":[{"podSelector":{"matchLabels":{"role":"nobody"}}}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web, Ingress: []allow{}}},
	}, {
		name: "egress rules isolate egress when no types are named",
		policies: []string{`{"metadata":{"name":"db","namespace":"shop"},"spec":{
			"podSelector":{"matchExpressions":[{"key":"app","operator":"Exists"},{"key":"role","operator":"DoesNotExist"}]},
			"egress":[{"to":[{"podSelector":{"matchLabels":{"role":"client"}}}],"ports":[{"port":"http"},{"protocol":"UDP"}]}]}}`},
		want: []podPolicy{
			{Pod: "shop/web", IP: web, Ingress: []allow{}, Egress: []allow{
				{Peers: []ipRange{one("10.192.1.5")}, Ports: []portRange{{Proto: 17, From: 0, To: 65535}}},
				{Peers: []ipRange{one("10.192.1.5")}, Ports: []portRange{tcp(9090, 9090)}},
			}},
			{Pod: "shop/db", IP: db, Ingress: []allow{}, Egress: []allow{
				{Peers: []ipRange{one("10.192.1.5")}, Ports: []portRange{{Proto: 17, From: 0, To: 65535}}},
				{Peers: []ipRange{one("10.192.1.5")}, Ports: []portRange{tcp(9090, 9090)}},
			}},
		},
	}, {
		name: "egress only, to anywhere on a named port of any pod",
		policies: []string{`{"metadata":{"name":"web","namespace":"shop"},"spec":{
			"podSelector":{"matchLabels":{"app":"web"}},"policyTypes":["Egress"],
			"egress":[{"ports":[{"protocol":"UDP","port":"dns"}]}]}}`},
		want: []podPolicy{{Pod: "shop/web", IP: web, Egress: []allow{
			{Peers: []ipRange{one("10.192.0.3")}, Ports: []portRange{{Proto: 17, From: 53, To: 53}}}}}},
	}, {
		name: "policies add up",
		policies: []string{
			`{"metadata":{"name":"deny","namespace":"shop"},"spec":{"podSelector":{},"policyTypes":["Ingress"]}}`,
			`{"metadata":{"name":"web","namespace":"shop"},"spec":{"podSelector":{"matchLabels":{"app":"web"}},
				"ingress":[{"ports":[{"port":8080}]}]}}`,
		},
		want: []podPolicy{
			{Pod: "shop/web", IP: web, Ingress: []allow{{Ports: []portRange{tcp(8080, 8080)}}}},
			{Pod: "shop/db", IP: db, Ingress: []allow{}},
		},
	}, {
		name: "an operator it does not know selects nothing",
		policies: []string{`{"metadata":{"name":"deny","namespace":"shop"},"spec":{
			"podSelector":{"matchExpressions":[{"key":"app","operator":"Near"}]},"policyTypes":["Ingress"]}}`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPolicyCluster(t)
			decodeInto(t, c.policies, tc.policies...)
			got := policyRules("me", c.policies, c.pods, c.namespaces)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("policyRules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIPBlockRanges(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   []ipRange
	}{
		{"0.0.0.0/0", nil, []ipRange{{ip("0.0.0.0"), ip("255.255.255.255")}}},
		{"10.0.0.7/32", nil, []ipRange{one("10.0.0.7")}},
		{"10.0.0.5/24", []string{"10.0.0.0/25"}, []ipRange{{ip("10.0.0.128"), ip("10.0.0.255")}}},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, []ipRange{}},
		{"10.0.0.0/24", []string{"11.0.0.0/8", "fd00::/8", "junk"}, []ipRange{{ip("10.0.0.0"), ip("10.0.0.255")}}},
		{"fd00::/8", nil, nil},
		{"junk", nil, nil},
	} {
		got := ipBlockRanges(tc.cidr, tc.except)
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("ipBlockRanges(%q, %q) (-want +got):\n%s", tc.cidr, tc.except, diff)
		}
	}
}
