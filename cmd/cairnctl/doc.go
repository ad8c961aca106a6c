// Command cairnctl is the operator's CLI for a Cairn cluster: it writes node
// parameters onto images, takes ownership of a new cluster and then manages
// it over mutually authenticated gRPC.
//
//	params bootstrap ──▶ image ESP cairn/parameters.pb ──boot──▶ first node
//	                                                              │
//	takeownership ──AAA.Escrow (trust on first use)──────────────▶│ curator :7833
//	     │  owner certificate + CA ◀──────────────────────────────┤
//	     ▼                                                        │
//	config dir ──owner mTLS──▶ cluster info|rotate-ticket, node ..., params register
//	           ──owner mTLS──▶ logs ID, node reboot|poweroff ID ──▶ node ID :7835
//	                           (only node ID's own certificate is accepted)
//
// # Configuration directory
//
// --config DIR, by default $XDG_CONFIG_HOME/cairnctl (~/.config/cairnctl when
// XDG_CONFIG_HOME is unset), holds:
//
//	owner-key.pem          the owner's ed25519 key, PKCS #8 PEM, mode 0600;
//	                       made by the first `params bootstrap`
//	owner-certificate.pem  the owner certificate, from takeownership
//	ca-certificate.pem     the cluster CA certificate, from takeownership
//	config.json            {"endpoints": ["HOST:PORT", ...],
//	                        "node_endpoints": {"cairn-...": "HOST:PORT"}}
//
// endpoints are the curators tried in turn when no --endpoint is given;
// takeownership stores the ones it was given. node_endpoints override where a
// node's management port (7835) is dialled, for nodes whose own address is
// not routable from here (a local qemu cluster behind port forwards); the
// --node-endpoint ID=HOST:PORT flag overrides them in turn, and `cairnctl
// config set-node-endpoint` stores them. Wherever it dials, cairnctl accepts
// only the node certificate of the node it names: another node of the
// cluster answering there is refused in the TLS handshake, before any
// request leaves, with an error naming both nodes.
//
// # Output
//
// Commands that print data print a table by default and JSON with -o json.
// `node list -o json` prints an array of the objects `node describe -o json`
// prints (see nodeView for the fields).
package main
