package main

// protocolsPath is where the C library looks up IP protocols by name and
// number (protocols(5)).
const protocolsPath = "/etc/protocols"

// protocols is the node's protocols(5) file: the IP protocols a node's
// programs name. nft, which kube-proxy runs, prints a protocol by the name
// this file gives its number. Without the file it printed "6" where
// kube-proxy had written "tcp", so kube-proxy took every Service element
// it read back at its hourly full sync for a stale one and deleted it:
// the ClusterIPs of a node were refused an hour after kube-proxy started.
const protocols = `# protocols(5) of a Cairn node: name, number, aliases.
ip	0	IP
icmp	1	ICMP
igmp	2	IGMP
ipencap	4	IP-ENCAP
tcp	6	TCP
udp	17	UDP
ipv6	41	IPv6
ipv6-route	43	IPv6-Route
ipv6-frag	44	IPv6-Frag
gre	47	GRE
esp	50	IPSEC-ESP
ah	51	IPSEC-AH
ipv6-icmp	58	IPv6-ICMP
ipv6-nonxt	59	IPv6-NoNxt
ipv6-opts	60	IPv6-Opts
vrrp	112	VRRP
l2tp	115	L2TP
sctp	132	SCTP
udplite	136	UDPLite
`

// writeProtocols writes the node's protocols file at path. The core
// writes it into the in-memory root once per boot, before kube-proxy can
// start.
func writeProtocols(path string) error {
	return writeRootFile(path, protocols)
}
