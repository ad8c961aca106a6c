// Package cluster is the node's enrolment: it decides, once per boot, how
// the node belongs to a cluster, opens its data partition accordingly and
// hands the role server (node/roleserve) the node's Membership.
//
// # Which way in
//
//	ESP: cairn/sealed_configuration.pb present?
//	  │ yes ───────────────────────────────────────────▶ join
//	  │ no
//	  ▼
//	node parameters (node/parameters, read once per boot)
//	  │ cluster_bootstrap ─────────────────────────────▶ bootstrap
//	  │ cluster_register ──────────────────────────────▶ register
//	  │ none ──▶ say so, wait, read again
//	  │ garbled ──▶ console ERROR, retry with backoff
//
// The sealed configuration decides first: a disk that holds a cluster is
// never bootstrapped or registered again, whatever parameters it is handed.
// No path ever formats a data partition that a sealed configuration
// describes, and a sealed configuration that cannot be read stops
// enrolment (console ERROR, retry with backoff) instead of sending the node
// down another path.
//
// # The three ways
//
//	bootstrap   keys ─▶ MountNew ─▶ Membership{Bootstrap data}
//	            the role server starts etcd, writes the cluster's state,
//	            makes the node's identity (Credentials) and stores the
//	            cluster directory; enrolment then stores identity.pem and
//	            seals the configuration
//
//	register    keys ─▶ RegisterNode(ticket) ─▶ CommitNode until approved
//	            ─▶ MountNew ─▶ Membership{Credentials} ─▶ identity.pem;
//	            once the role server stored the directory: sealed
//	            configuration
//
//	join        unseal ─▶ JoinNode(join key) on each curator of the ESP's
//	            cluster directory ─▶ MountExisting(cluster unlock key)
//	            ─▶ identity.pem ─▶ Membership{Credentials}
//	            no curator answers ─▶ cold start: MountExisting with the
//	            cluster unlock key kept in the sealed configuration
//
// Enrolment hands over plain data and keeps nothing running in the role
// server's subtree: what flows back (the bootstrapped identity, the stored
// directory) are the role server's values, which enrolment only watches.
//
//	parameters ──▶ enrolment ──Membership──▶ roleserve
//	                   ▲                        │
//	                   └─ Credentials, ─────────┘
//	                      StoredDirectory
//
// Each file has one writer: enrolment writes identity.pem and the sealed
// configuration, the role server the cluster directory.
//
// In every way the sealed configuration is written last, after the
// identity is on the data partition and the cluster directory on the ESP:
// until it exists, a reboot starts the first enrolment over, and once it
// exists, every boot is a join.
//
// # Secrets
//
// The data partition's key is the node unlock key XOR the cluster unlock
// key. The node keeps its half, its join key and (for cold starts) a copy
// of the cluster's half in the sealed configuration, sealed by the TPM
// when the cluster's TPM mode allows. docs/security.md explains what that
// protects against and what it does not.
package cluster
