// Command cairnctl is the operator's CLI for a Cairn cluster: it writes node
// parameters onto images, takes ownership of a new cluster and then manages
// it over mutually authenticated gRPC.
//
//	params bootstrap ──▶ image ESP cairn/parameters.pb ──boot──▶ first node
//	                                                              │
//	takeownership ──AAA.Escrow (trust on first use)──────────────▶│ curator :7833
//	     │  owner certificate + CA ◀──────────────────────────────┤
//	     ▼                                                        │
//	config dir ──owner mTLS──▶ cluster info|rotate-ticket|backup|update, node ..., params register
//	           ──owner mTLS──▶ owner show|rotate-key|revoke (renew: AAA.Escrow)
//	           ──owner mTLS──▶ logs ID, node reboot|poweroff|update|slots ID ──▶ node ID :7835
//	                           cluster recover --node ID
//	                           (only node ID's own certificate is accepted)
//
// # Configuration directory and contexts
//
// --config DIR, by default $XDG_CONFIG_HOME/cairnctl (~/.config/cairnctl when
// XDG_CONFIG_HOME is unset), holds contexts: one per cluster, each the files
// that reach it.
//
//	owner-key.pem          the owner's ed25519 key, PKCS #8 PEM, mode 0600;
//	                       made by the first `params bootstrap`
//	owner-certificate.pem  the owner certificate, from takeownership;
//	                       renewed before a command once less than a
//	                       third of its lifetime is left (owner.go)
//	ca-certificate.pem     the cluster CA certificate, from takeownership
//	config.json            {"endpoints": ["HOST:PORT", ...],
//	                        "node_endpoints": {"cairn-...": "HOST:PORT"}}
//	owner-key.new.pem      the new owner key of an unfinished `owner
//	                       rotate-key`, until it is installed
//	owner-key.old.pem      the old owner key, while rotate-key installs
//	                       the new one
//
// The context "default" keeps these files in DIR itself, which is all
// there was before contexts (such a directory needs no migration); every
// other context keeps them in DIR/contexts/NAME. DIR/current-context names
// the context in use ("default" when it is missing); --context NAME picks
// one for a single command.
//
//	config contexts                  lists them, * marking the one in use
//	config use-context NAME          selects one
//	config add-context NAME          adds an empty one
//	config add-context NAME --from D [--use]
//	                                 copies (or replaces it with) the
//	                                 context D uses; make cluster does this
//
// endpoints are the curators cairnctl dials when no --endpoint is given;
// takeownership stores the ones it was given. node_endpoints override where a
// node's management port (7835) is dialled, for nodes whose own address is
// not routable from here (a local qemu cluster behind port forwards); the
// --node-endpoint ID=HOST:PORT flag overrides them in turn, and `cairnctl
// config set-node-endpoint` stores them. Wherever it dials, cairnctl accepts
// only the node certificate of the node it names: another node of the
// cluster answering there is refused in the TLS handshake, before any
// request leaves, with an error naming both nodes.
//
// # Failover
//
// Every curator forwards calls to the leader, so a cluster-wide command may
// use any of them. cairnctl dials the preferred endpoint and, when it has not
// connected within 250 ms or failed, the next as well, and uses the first
// that completes the TLS handshake; one that accepts connections but never
// answers (a dead machine behind a port forward) costs that delay, not the
// command's deadline. A call that finds no leader (Unavailable) or does not
// answer within its attempt timeout (10 s) is made again, until --timeout,
// so commands succeed as soon as the cluster has a leader again. Per-node
// commands (logs, node reboot, node poweroff) fail within the connect
// timeout (5 s) when the node does not answer. See failover.go.
//
// # Output
//
// Commands that print data print a table by default and JSON with -o json.
// `node list -o json` prints an array of the objects `node describe -o json`
// prints (see nodeView for the fields).
package main
