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
//	register    keys, kept on the ESP ─▶ RegisterNode(ticket) ─▶ CommitNode
//	            until approved ─▶ MountNew ─▶ Membership{Credentials}
//	            ─▶ identity.pem; once the role server stored the
//	            directory: sealed configuration, then the kept keys go
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
// Each file has one writer: enrolment writes identity.pem, the sealed
// configuration and the registration keys, the role server the cluster
// directory.
//
// In every way the sealed configuration is written last, after the
// identity is on the data partition and the cluster directory on the ESP:
// until it exists, a reboot starts the first enrolment over, and once it
// exists, every boot is a join.
//
// # Power cuts during the first enrolment
//
// Starting over must not leave the cluster with two records of one
// machine, nor format a data partition that holds a cluster:
//
//   - A bootstrapping node starts over with new keys and a new data
//     partition: nobody else knows its keys yet.
//   - A registering node starts over with the keys it wrote onto the ESP
//     before its first RegisterNode (cairn/registration_keys.pb, sealed
//     by the TPM when there is one; keys.go says why and what happens
//     when they cannot be used). The curator answers RegisterNode and
//     CommitNode of a node it knows with these keys as it did before, so
//     the machine keeps its node ID and its one record, NEW or UP; and
//     its data key is the same, so MountNew keeps a data partition that
//     the cut boot finished.
//   - Once the sealed configuration exists, every boot joins and opens the
//     partition with MountExisting, which never formats. Removing the kept
//     keys and the parameters comes after sealing, and a join redoes it.
//
// node/testpoint names the steps at which the end-to-end suite
// TestPowerCut stops a test image and cuts its power: registered,
// committed and sealed here; the storage steps in node/localstorage.
//
// # Secrets
//
// The data partition's key is the node unlock key XOR the cluster unlock
// key. The node keeps its half, its join key and (for cold starts) a copy
// of the cluster's half in the sealed configuration, sealed by the TPM
// when the cluster's TPM mode allows. docs/security.md explains what that
// protects against and what it does not.
//
// # Files
//
//	service.go    Config, Service, Run: which way in, then sealing
//	bootstrap.go  the bootstrap way
//	register.go   the register way: RegisterNode, approval, CommitNode
//	join.go       the join way and cold starts
//	dial.go       reaching the curators of a cluster directory
//	keys.go       the node's keys, and those kept on the ESP while
//	              registering
//	sealed.go     the sealed configuration: envelope, TPM, writing it
//	storage.go    the data partition, identity.pem, the ESP's cluster
//	              directory
//	backoff.go    the backoff between rounds of dialling
package cluster
