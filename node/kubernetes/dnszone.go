package kubernetes

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/dns/dnsmessage"

	"cairn.dev/cairn/pkg/dnsserver"
)

// dnsTTL is the TTL of the cluster zone's records, and how long a
// resolver remembers that a name has none: Services come and go, so
// answers are short-lived, as in the Kubernetes DNS specification.
const dnsTTL = 5

// A service is what the cluster zone needs of a Service object.
type service struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Type         string        `json:"type"`
		ClusterIP    string        `json:"clusterIP"`
		ClusterIPs   []string      `json:"clusterIPs"`
		ExternalName string        `json:"externalName"`
		Ports        []servicePort `json:"ports"`
	} `json:"spec"`
}

// A servicePort is a named port of a Service or an EndpointSlice.
type servicePort struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}

// An endpointSlice is what the cluster zone needs of an EndpointSlice.
type endpointSlice struct {
	Metadata    objectMeta `json:"metadata"`
	AddressType string     `json:"addressType"`
	Endpoints   []struct {
		Addresses  []string `json:"addresses"`
		Hostname   string   `json:"hostname"`
		Conditions struct {
			Ready *bool `json:"ready"`
		} `json:"conditions"`
	} `json:"endpoints"`
	Ports []servicePort `json:"ports"`
}

// labelServiceName names the Service of an EndpointSlice.
const labelServiceName = "kubernetes.io/service-name"

// clusterZone answers the names of the cluster domain (ClusterDomain):
//
//	<service>.<namespace>.svc.<domain>            A: the cluster IP, or a
//	                                              headless Service's ready
//	                                              endpoints; CNAME: an
//	                                              ExternalName Service
//	<hostname>.<service>.<namespace>.svc.<domain> A: that endpoint of a
//	                                              headless Service
//	_<port>._<proto>.<service>.<namespace>.svc... SRV: the named port
//	<a-b-c-d>.<namespace>.pod.<domain>            A: a.b.c.d
//	<d>.<c>.<b>.<a>.in-addr.arpa                  PTR: the Service whose
//	                                              cluster IP a.b.c.d is, or
//	                                              the headless Service's
//	                                              endpoint that has it
//
// Of the reverse names it holds only the addresses it knows: a question
// for any other goes where outside names go, as the Kubernetes DNS
// specification's reverse records leave it.
//
// It is immutable once built; a change makes a new one.
type clusterZone struct {
	domain     string
	soa        dnsmessage.Resource
	services   map[string]*zoneService // by "<name>.<namespace>"
	namespaces map[string]bool
	// reverse holds the names each address has, for PTR questions.
	reverse map[netip.Addr][]string
}

// A zoneService is one Service as the zone answers it.
type zoneService struct {
	name, namespace string
	clusterIPs      []netip.Addr
	headless        bool
	externalName    string
	ports           []servicePort
	endpoints       []zoneEndpoint
}

// fqdn is the Service's name in the cluster domain, domain with its final
// dot: <name>.<namespace>.svc.<domain>.
func (zs *zoneService) fqdn(domain string) string {
	return zs.name + "." + zs.namespace + ".svc." + domain
}

// A zoneEndpoint is a ready endpoint of a headless Service.
type zoneEndpoint struct {
	addr     netip.Addr
	hostname string
	ports    []servicePort
}

// newClusterZone builds the zone of domain from the Services and
// EndpointSlices of the cluster (keyed as follow keys them).
func newClusterZone(domain string, services map[string]service, endpointSlices map[string]endpointSlice) *clusterZone {
	domain = dnsserver.Canonical(domain)
	z := &clusterZone{
		domain:     domain,
		services:   map[string]*zoneService{},
		namespaces: map[string]bool{},
		reverse:    map[netip.Addr][]string{},
	}
	z.soa = dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(domain), Type: dnsmessage.TypeSOA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
		Body: &dnsmessage.SOAResource{
			NS:      dnsmessage.MustNewName("ns.dns." + domain),
			MBox:    dnsmessage.MustNewName("hostmaster." + domain),
			Serial:  1,
			Refresh: 7200, Retry: 1800, Expire: 86400,
			MinTTL: dnsTTL,
		},
	}
	for _, s := range services {
		zs := &zoneService{
			name:      strings.ToLower(s.Metadata.Name),
			namespace: strings.ToLower(s.Metadata.Namespace),
			headless:  s.Spec.ClusterIP == "None",
			ports:     s.Spec.Ports,
		}
		if s.Spec.Type == "ExternalName" {
			if s.Spec.ExternalName == "" {
				continue
			}
			// Only this type names another: a Service made a ClusterIP
			// one from an ExternalName one may keep the field.
			zs.externalName = s.Spec.ExternalName
		}
		ips := s.Spec.ClusterIPs
		if len(ips) == 0 && s.Spec.ClusterIP != "" {
			ips = []string{s.Spec.ClusterIP}
		}
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip); err == nil && a.Is4() {
				zs.clusterIPs = append(zs.clusterIPs, a)
			}
		}
		z.services[zs.name+"."+zs.namespace] = zs
		z.namespaces[zs.namespace] = true
	}
	for _, es := range endpointSlices {
		zs := z.services[strings.ToLower(es.Metadata.Labels[labelServiceName])+"."+strings.ToLower(es.Metadata.Namespace)]
		if zs == nil || !zs.headless || es.AddressType != "IPv4" {
			continue
		}
		for _, e := range es.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, ip := range e.Addresses {
				if a, err := netip.ParseAddr(ip); err == nil && a.Is4() {
					zs.endpoints = append(zs.endpoints, zoneEndpoint{addr: a, hostname: strings.ToLower(e.Hostname), ports: es.Ports})
				}
			}
		}
	}
	for _, zs := range z.services {
		// The same answers in the same order for the same objects.
		slices.SortFunc(zs.endpoints, func(a, b zoneEndpoint) int { return a.addr.Compare(b.addr) })
		if zs.externalName != "" {
			continue
		}
		base := zs.fqdn(domain)
		for _, a := range zs.clusterIPs {
			z.reverse[a] = append(z.reverse[a], base)
		}
		for _, e := range zs.endpoints {
			z.reverse[e.addr] = append(z.reverse[e.addr], e.host()+"."+base)
		}
	}
	for a, names := range z.reverse {
		slices.Sort(names)
		z.reverse[a] = slices.Compact(names)
	}
	return z
}

// host is the endpoint's first label under its Service's name: its
// hostname, or its address with dashes.
func (e zoneEndpoint) host() string {
	if e.hostname != "" {
		return e.hostname
	}
	return dashed(e.addr)
}

// answer is the zone's dnsserver.Zone.
func (z *clusterZone) answer(q dnsmessage.Question) (dnsserver.Answer, bool) {
	name := dnsserver.Canonical(q.Name.String())
	if name == z.domain {
		if q.Type == dnsmessage.TypeSOA {
			return dnsserver.Answer{Records: []dnsmessage.Resource{z.soa}}, true
		}
		return z.noData(), true
	}
	if rev, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		return z.reverseAnswer(q, rev)
	}
	rest, ok := strings.CutSuffix(name, "."+z.domain)
	if !ok {
		return dnsserver.Answer{}, false
	}
	labels := strings.Split(rest, ".")
	kind, labels := labels[len(labels)-1], labels[:len(labels)-1]
	switch kind {
	case "svc":
		return z.serviceAnswer(q, labels), true
	case "pod":
		return z.podAnswer(q, labels), true
	}
	return z.noName(), true
}

// serviceAnswer answers a name under svc.<domain>; labels are the labels
// before "svc", in order.
func (z *clusterZone) serviceAnswer(q dnsmessage.Question, labels []string) dnsserver.Answer {
	n := len(labels)
	switch {
	case n == 0:
		return z.noData()
	case n == 1:
		if z.namespaces[labels[0]] {
			return z.noData()
		}
		return z.noName()
	}
	zs := z.services[labels[n-2]+"."+labels[n-1]]
	if zs == nil {
		return z.noName()
	}
	switch n {
	case 2:
		return z.serviceRecords(q, zs)
	case 3:
		return z.endpointRecords(q, zs, labels[0])
	case 4:
		if strings.HasPrefix(labels[0], "_") && strings.HasPrefix(labels[1], "_") {
			return z.srvRecords(q, zs, labels[0][1:], labels[1][1:])
		}
	}
	return z.noName()
}

// serviceRecords answers the name of Service zs itself.
func (z *clusterZone) serviceRecords(q dnsmessage.Question, zs *zoneService) dnsserver.Answer {
	if zs.externalName != "" {
		target, err := dnsmessage.NewName(dnsserver.Canonical(zs.externalName))
		if err != nil {
			return z.noData()
		}
		return dnsserver.Answer{Records: []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			Body:   &dnsmessage.CNAMEResource{CNAME: target},
		}}}
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeALL {
		return z.noData()
	}
	var rs []dnsmessage.Resource
	if zs.headless {
		for _, e := range zs.endpoints {
			rs = append(rs, dnsserver.A(q.Name, dnsTTL, e.addr))
		}
	} else {
		for _, a := range zs.clusterIPs {
			rs = append(rs, dnsserver.A(q.Name, dnsTTL, a))
		}
	}
	if len(rs) == 0 {
		return z.noData()
	}
	return dnsserver.Answer{Records: rs}
}

// endpointRecords answers <host>.<service>... for a headless Service:
// host is an endpoint's hostname, or its address with dashes.
func (z *clusterZone) endpointRecords(q dnsmessage.Question, zs *zoneService, host string) dnsserver.Answer {
	for _, e := range zs.endpoints {
		if e.hostname == host || dashed(e.addr) == host {
			if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeALL {
				return z.noData()
			}
			return dnsserver.Answer{Records: []dnsmessage.Resource{dnsserver.A(q.Name, dnsTTL, e.addr)}}
		}
	}
	return z.noName()
}

// srvRecords answers _<port>._<proto>.<service>...: one record for a
// Service with a cluster IP, one per ready endpoint of a headless one.
func (z *clusterZone) srvRecords(q dnsmessage.Question, zs *zoneService, port, proto string) dnsserver.Answer {
	match := func(p servicePort) bool {
		return strings.EqualFold(p.Name, port) && strings.EqualFold(p.Protocol, proto)
	}
	base := zs.fqdn(z.domain)
	var rs []dnsmessage.Resource
	add := func(target string, port int) {
		t, err := dnsmessage.NewName(target)
		if err != nil {
			return
		}
		rs = append(rs, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			Body:   &dnsmessage.SRVResource{Priority: 0, Weight: 100, Port: uint16(port), Target: t},
		})
	}
	exists := false
	if zs.headless {
		for _, e := range zs.endpoints {
			for _, p := range e.ports {
				if match(p) {
					exists = true
					add(e.host()+"."+base, p.Port)
				}
			}
		}
	} else {
		for _, p := range zs.ports {
			if match(p) {
				exists = true
				add(base, p.Port)
			}
		}
	}
	switch {
	case !exists:
		return z.noName()
	case q.Type != dnsmessage.TypeSRV && q.Type != dnsmessage.TypeALL:
		return z.noData()
	}
	return dnsserver.Answer{Records: rs}
}

// podAnswer answers <a-b-c-d>.<namespace>.pod.<domain> with a.b.c.d,
// whether or not a pod has it, as the Kubernetes DNS specification
// allows; labels are the labels before "pod".
func (z *clusterZone) podAnswer(q dnsmessage.Question, labels []string) dnsserver.Answer {
	switch len(labels) {
	case 0, 1:
		return z.noData()
	case 2:
		addr, err := netip.ParseAddr(strings.ReplaceAll(labels[0], "-", "."))
		if err != nil || !addr.Is4() {
			return z.noName()
		}
		if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeALL {
			return z.noData()
		}
		return dnsserver.Answer{Records: []dnsmessage.Resource{dnsserver.A(q.Name, dnsTTL, addr)}}
	}
	return z.noName()
}

// reverseAnswer answers <d>.<c>.<b>.<a>.in-addr.arpa, rev being the
// labels before in-addr.arpa, if the zone knows the address a.b.c.d;
// ok is false for every other address.
func (z *clusterZone) reverseAnswer(q dnsmessage.Question, rev string) (a dnsserver.Answer, ok bool) {
	labels := strings.Split(rev, ".")
	if len(labels) != 4 {
		return dnsserver.Answer{}, false
	}
	slices.Reverse(labels)
	addr, err := netip.ParseAddr(strings.Join(labels, "."))
	if err != nil || !addr.Is4() {
		return dnsserver.Answer{}, false
	}
	names := z.reverse[addr]
	if len(names) == 0 {
		return dnsserver.Answer{}, false
	}
	if q.Type != dnsmessage.TypePTR && q.Type != dnsmessage.TypeALL {
		return dnsserver.Answer{}, true
	}
	var rs []dnsmessage.Resource
	for _, n := range names {
		target, err := dnsmessage.NewName(n)
		if err != nil {
			continue
		}
		rs = append(rs, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypePTR, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			Body:   &dnsmessage.PTRResource{PTR: target},
		})
	}
	return dnsserver.Answer{Records: rs}, true
}

// noData is the answer for a name that exists without the type asked.
func (z *clusterZone) noData() dnsserver.Answer {
	return dnsserver.Answer{Authority: &z.soa}
}

// noName is the answer for a name the zone does not have.
func (z *clusterZone) noName() dnsserver.Answer {
	return dnsserver.Answer{RCode: dnsmessage.RCodeNameError, Authority: &z.soa}
}

// dashed writes an IPv4 address with dashes, as DNS labels of pods and
// endpoints spell them.
func dashed(a netip.Addr) string {
	b := a.As4()
	return strconv.Itoa(int(b[0])) + "-" + strconv.Itoa(int(b[1])) + "-" + strconv.Itoa(int(b[2])) + "-" + strconv.Itoa(int(b[3]))
}
