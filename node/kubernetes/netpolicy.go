package kubernetes

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// NetworkPolicy is enforced by each worker for the pods it runs, on both
// ends: a pod's egress rules where it sends from, a pod's ingress rules
// where it receives. This file turns the cluster's NetworkPolicies,
// Namespaces and Pods into what the node's pods may do (policyRules);
// netpolicy_nft.go programs that into nftables.
//
// A pod that no policy selects for a direction is not isolated in it.
// One that some policy selects may take, in that direction, exactly what
// the union of their rules allows; answers of allowed connections are
// always allowed (conntrack). Traffic between a pod and its own node (the
// kubelet's probes, the node's DNS) is never filtered, as in most
// implementations: it is the node's to allow.

// networkPolicy is what Cairn reads of a networking.k8s.io/v1
// NetworkPolicy.
type networkPolicy struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		PodSelector labelSelector `json:"podSelector"`
		PolicyTypes []string      `json:"policyTypes"`
		Ingress     []struct {
			From  []policyPeer `json:"from"`
			Ports []policyPort `json:"ports"`
		} `json:"ingress"`
		Egress []struct {
			To    []policyPeer `json:"to"`
			Ports []policyPort `json:"ports"`
		} `json:"egress"`
	} `json:"spec"`
}

// policyPeer is one peer of a rule: pods (by pod and namespace
// selectors) or an IP block.
type policyPeer struct {
	PodSelector       *labelSelector `json:"podSelector"`
	NamespaceSelector *labelSelector `json:"namespaceSelector"`
	IPBlock           *struct {
		CIDR   string   `json:"cidr"`
		Except []string `json:"except"`
	} `json:"ipBlock"`
}

// policyPort is one port of a rule: a number, a range up to EndPort, a
// container port's name, or (Port unset) every port of Protocol.
type policyPort struct {
	Protocol string          `json:"protocol"`
	Port     json.RawMessage `json:"port"`
	EndPort  int             `json:"endPort"`
}

// labelSelector is a metav1.LabelSelector.
type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

// matches reports whether labels satisfy s; an empty selector matches
// everything, an operator it does not know nothing.
func (s *labelSelector) matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		var match bool
		switch e.Operator {
		case "In":
			match = ok && slices.Contains(e.Values, v)
		case "NotIn":
			match = !ok || !slices.Contains(e.Values, v)
		case "Exists":
			match = ok
		case "DoesNotExist":
			match = !ok
		}
		if !match {
			return false
		}
	}
	return true
}

// policyPod is what Cairn reads of a Pod for NetworkPolicy.
type policyPod struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		NodeName    string `json:"nodeName"`
		HostNetwork bool   `json:"hostNetwork"`
		Containers  []struct {
			Ports []struct {
				Name          string `json:"name"`
				ContainerPort int    `json:"containerPort"`
				Protocol      string `json:"protocol"`
			} `json:"ports"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase  string `json:"phase"`
		PodIPs []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
	} `json:"status"`
}

// ipv4 is the pod's IPv4 address on the pod network, if it has one and
// is not finished (a finished pod's address may be another's already).
func (p *policyPod) ipv4() (netip.Addr, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
		return netip.Addr{}, false
	}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// namedPort is the port of p's containers called name, for protocol.
func (p *policyPod) namedPort(name, protocol string) (uint16, bool) {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name && cmp.Or(port.Protocol, "TCP") == protocol && port.ContainerPort > 0 && port.ContainerPort < 1<<16 {
				return uint16(port.ContainerPort), true
			}
		}
	}
	return 0, false
}

// kubeNamespace is what Cairn reads of a Namespace: its labels.
type kubeNamespace struct {
	Metadata objectMeta `json:"metadata"`
}

// ipRange is the IPv4 addresses From to To, both included.
type ipRange struct{ From, To netip.Addr }

// portRange is the ports From to To of an IP protocol, both included.
type portRange struct {
	Proto    uint8
	From, To uint16
}

// An allow lets through traffic with the other end in one of Peers
// (nil: anywhere) to one of Ports (nil: any port, any protocol).
type allow struct {
	Peers []ipRange
	Ports []portRange
}

// podPolicy is what one of the node's pods may receive and send. A nil
// Ingress or Egress is a direction no policy isolates; an empty one
// allows nothing.
type podPolicy struct {
	// Pod is the pod's namespace/name, for logs.
	Pod             string
	IP              netip.Addr
	Ingress, Egress []allow
}

// policyRules is what each pod of node may do under policies, for the
// pods that some policy isolates, in the order of their addresses.
func policyRules(node string, policies map[string]networkPolicy, pods map[string]policyPod, namespaces map[string]kubeNamespace) []podPolicy {
	pc := policyCompiler{namespaces: namespaces}
	for _, key := range sortedKeys(pods) {
		p := pods[key]
		if ip, ok := p.ipv4(); ok {
			pc.pods = append(pc.pods, addressedPod{key, ip, &p})
		}
	}
	// What a policy allows depends on the pod it selects only through
	// ingress named ports: the rest is worked out once per policy, not
	// once per pod it selects.
	compiled := make([]compiledPolicy, 0, len(policies))
	for _, np := range sortedValues(policies) {
		compiled = append(compiled, pc.compile(&np))
	}
	for _, ap := range pc.pods {
		p := ap.pod
		if p.Spec.NodeName != node {
			continue
		}
		out := podPolicy{Pod: ap.key, IP: ap.ip}
		for _, cp := range compiled {
			if cp.np.Metadata.Namespace != p.Metadata.Namespace || !cp.np.Spec.PodSelector.matches(p.Metadata.Labels) {
				continue
			}
			if cp.ingress {
				out.Ingress = append(isolated(out.Ingress), cp.ingressInto(p)...)
			}
			if cp.egress {
				out.Egress = append(isolated(out.Egress), cp.egressAllows...)
			}
		}
		if out.Ingress != nil || out.Egress != nil {
			pc.out = append(pc.out, out)
		}
	}
	slices.SortFunc(pc.out, func(a, b podPolicy) int { return a.IP.Compare(b.IP) })
	return pc.out
}

// isolated is a, empty rather than nil: a direction isolated, even if
// no rule allows anything in it.
func isolated(a []allow) []allow {
	if a == nil {
		return []allow{}
	}
	return a
}

// types reports which directions np isolates: its policyTypes, or, when
// it names none, ingress always and egress when it has egress rules.
func (np *networkPolicy) types() (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, "Ingress"), slices.Contains(np.Spec.PolicyTypes, "Egress")
}

type policyCompiler struct {
	// pods are the pods with an address on the pod network, in the
	// order of their keys.
	pods       []addressedPod
	namespaces map[string]kubeNamespace
	out        []podPolicy
}

// addressedPod is a pod with its key and address.
type addressedPod struct {
	key string
	ip  netip.Addr
	pod *policyPod
}

// compiledPolicy is a policy with what it allows worked out as far as
// it can be without the pod it selects.
type compiledPolicy struct {
	np              *networkPolicy
	ingress, egress bool
	ingressRules    []ingressRule
	egressAllows    []allow
}

// ingressRule is an ingress rule's peers and numbered ports; named
// holds the port names, which each target resolves for itself.
type ingressRule struct {
	peers    peerSet
	ports    []portRange
	named    []namedRulePort
	anyPorts bool
}

// compile works out np's peers, and its egress allows, for every pod it
// selects.
func (pc *policyCompiler) compile(np *networkPolicy) compiledPolicy {
	cp := compiledPolicy{np: np}
	cp.ingress, cp.egress = np.types()
	if cp.ingress {
		for _, r := range np.Spec.Ingress {
			ports, named := numberedPorts(r.Ports)
			cp.ingressRules = append(cp.ingressRules, ingressRule{
				peers: pc.peers(np.Metadata.Namespace, r.From),
				ports: ports, named: named, anyPorts: len(r.Ports) == 0,
			})
		}
	}
	if cp.egress {
		cp.egressAllows = pc.egress(np)
	}
	return cp
}

// ingressInto is what cp's ingress rules let into target.
func (cp *compiledPolicy) ingressInto(target *policyPod) []allow {
	var out []allow
	for _, r := range cp.ingressRules {
		ports := r.ports
		for _, n := range r.named {
			if port, ok := target.namedPort(n.name, n.protocol); ok {
				ports = append(slices.Clip(ports), portRange{Proto: protocolNumber(n.protocol), From: port, To: port})
			}
		}
		if !r.anyPorts && len(ports) == 0 {
			continue // only names the target has no port of
		}
		if r.peers.none {
			continue
		}
		out = append(out, allow{Peers: r.peers.ranges, Ports: ports})
	}
	return out
}

// egress is what np's egress rules let out of the pods it selects. A
// named port is the port of that name on each peer pod.
func (pc *policyCompiler) egress(np *networkPolicy) []allow {
	var out []allow
	for _, r := range np.Spec.Egress {
		peers := pc.peers(np.Metadata.Namespace, r.To)
		if peers.none {
			continue
		}
		ports, named := numberedPorts(r.Ports)
		if len(ports) > 0 || len(r.Ports) == 0 {
			out = append(out, allow{Peers: peers.ranges, Ports: ports})
		}
		candidates := peers.pods
		if len(r.To) == 0 {
			candidates = pc.pods
		}
		for _, n := range named {
			for _, p := range candidates {
				if port, ok := p.pod.namedPort(n.name, n.protocol); ok {
					out = append(out, allow{
						Peers: []ipRange{{p.ip, p.ip}},
						Ports: []portRange{{Proto: protocolNumber(n.protocol), From: port, To: port}},
					})
				}
			}
		}
	}
	return out
}

// peerSet is the peers of a rule: ranges (nil with none false: anyone),
// and the pods among them, for named ports.
type peerSet struct {
	ranges []ipRange
	pods   []addressedPod
	none   bool
}

// peers is the peers of a rule of a policy in namespace ns.
func (pc *policyCompiler) peers(ns string, list []policyPeer) peerSet {
	if len(list) == 0 {
		return peerSet{}
	}
	var s peerSet
	for _, peer := range list {
		if peer.IPBlock != nil {
			s.ranges = append(s.ranges, ipBlockRanges(peer.IPBlock.CIDR, peer.IPBlock.Except)...)
			continue
		}
		for _, p := range pc.pods {
			if pc.selects(ns, &peer, p.pod) {
				s.ranges = append(s.ranges, ipRange{p.ip, p.ip})
				s.pods = append(s.pods, p)
			}
		}
	}
	s.none = len(s.ranges) == 0
	return s
}

// selects reports whether peer, of a policy in namespace ns, is pod p.
func (pc *policyCompiler) selects(ns string, peer *policyPeer, p *policyPod) bool {
	if peer.NamespaceSelector == nil {
		if p.Metadata.Namespace != ns {
			return false
		}
	} else if n, ok := pc.namespaces["/"+p.Metadata.Namespace]; !ok || !peer.NamespaceSelector.matches(n.Metadata.Labels) {
		return false
	}
	return peer.PodSelector == nil || peer.PodSelector.matches(p.Metadata.Labels)
}

// namedRulePort is a port a rule names: name, for protocol.
type namedRulePort struct{ name, protocol string }

// numberedPorts is ports as ranges, and the names among them apart.
func numberedPorts(ports []policyPort) ([]portRange, []namedRulePort) {
	var out []portRange
	var named []namedRulePort
	for _, p := range ports {
		protocol := cmp.Or(p.Protocol, "TCP")
		proto := protocolNumber(protocol)
		if proto == 0 {
			continue
		}
		if len(p.Port) == 0 || string(p.Port) == "null" {
			out = append(out, portRange{Proto: proto, From: 0, To: 65535})
			continue
		}
		var name string
		if json.Unmarshal(p.Port, &name) == nil {
			// An int-or-string may carry a number as a string.
			if n, err := strconv.Atoi(name); err == nil {
				out = appendPortRange(out, proto, n, p.EndPort)
			} else {
				named = append(named, namedRulePort{name, protocol})
			}
			continue
		}
		var n int
		if json.Unmarshal(p.Port, &n) == nil {
			out = appendPortRange(out, proto, n, p.EndPort)
		}
	}
	return out, named
}

// appendPortRange appends port (to end, if end is after it) to out, if
// they are ports at all.
func appendPortRange(out []portRange, proto uint8, port, end int) []portRange {
	end = max(end, port)
	if port < 1 || end > 65535 {
		return out
	}
	return append(out, portRange{Proto: proto, From: uint16(port), To: uint16(end)})
}

// protocolNumber is the IP protocol number of a NetworkPolicy protocol,
// or 0 for one it is not.
func protocolNumber(p string) uint8 {
	switch strings.ToUpper(p) {
	case "TCP":
		return 6
	case "UDP":
		return 17
	case "SCTP":
		return 132
	}
	return 0
}

// ipBlockRanges is the IPv4 addresses of cidr but not of except, as
// ranges. An IPv6 or malformed block is no address.
func ipBlockRanges(cidr string, except []string) []ipRange {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil
	}
	lo, hi := prefixBounds(p)
	spans := [][2]uint32{{lo, hi}}
	for _, e := range except {
		ep, err := netip.ParsePrefix(e)
		if err != nil || !ep.Addr().Is4() {
			continue
		}
		elo, ehi := prefixBounds(ep)
		var next [][2]uint32
		for _, s := range spans {
			if ehi < s[0] || elo > s[1] {
				next = append(next, s)
				continue
			}
			if elo > s[0] {
				next = append(next, [2]uint32{s[0], elo - 1})
			}
			if ehi < s[1] {
				next = append(next, [2]uint32{ehi + 1, s[1]})
			}
		}
		spans = next
	}
	out := make([]ipRange, len(spans))
	for i, s := range spans {
		out[i] = ipRange{addr4(s[0]), addr4(s[1])}
	}
	return out
}

// prefixBounds is the first and last address of IPv4 prefix p.
func prefixBounds(p netip.Prefix) (uint32, uint32) {
	b := p.Masked().Addr().As4()
	lo := binary.BigEndian.Uint32(b[:])
	return lo, lo | uint32(1<<(32-p.Bits())-1)
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// sortedKeys is m's keys in order, so that what is compiled from maps
// comes out the same each time.
func sortedKeys[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sortedValues is m's values in the order of their keys.
func sortedValues[T any](m map[string]T) []T {
	out := make([]T, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}
