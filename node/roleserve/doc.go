// Package roleserve is the node's role server: once enrolment hands it the
// node's Membership, it runs what the node's roles ask for (etcd and the
// curator for ConsensusMember, the Kubernetes control plane for
// KubernetesController, the Kubernetes worker for KubernetesWorker) and
// keeps the node in touch with the cluster (roles, status, heartbeats,
// certificate, cluster directory, owner trust).
//
// Each piece is a worker: a type of its own, in a file of its own, whose
// fields name the values it reads (event.Watchable) and the values it
// writes (event.Value). The workers talk only through those values, so each
// one restarts only when its own inputs change, and a failing one takes
// nothing else down. Every value has one writer:
//
//	enrolment ── Membership ──▶ credentials, connection, rolefetch,
//	                            controlplane, clusterdir, ownertrust
//	network ── ExternalAddress ──▶ controlplane, statuspush, kube*
//
//	               bootstrapped
//	credentials ◀──────────────── controlplane ◀──── roles ──── rolefetch
//	   │ Credentials (also to      │    │ member: etcd, curator  (roles.pb)
//	   │ the other workers that    │    │ standby: wipes leftovers   │
//	   │ use the node's identity,  │    │                            │
//	   │ enrolment, node mgmt)     │    │ localEtcd                  │ roles
//	   ▼         localCurator      │    ▼                            ▼
//	connection ◀───────────────────┤  kubecontroller, kubeservices, kubeworker
//	   │    ▲      statuspush ◀────┘      ▲ kubeNodes (kubecontroller)
//	   │    │ curators                    │ apiservers (kubeworker), tunnelPeers
//	   │    │                             │ (kubeworker, kubeservices)
//	   │    └─────────────── clusterwatch ┘
//	   │                          │ directory
//	   │                          ▼
//	   │                      clusterdir ── StoredDirectory ──▶ enrolment
//	   │                      (cluster_directory.pb)
//	   ▼ curator: the ClientConn to the leader, for every worker that
//	     calls the curator (rolefetch, statuspush, heartbeat, renew,
//	     ownertrust, clusterwatch, controlplane, kube*)
//
//	ownertrust ── OwnerTrust (owner_trust.pb) ──▶ node management
//
//	rolefetch ── DesiredRelease ──▶ installer (cmd/init's update child)
//	installer ── SetUpdateStatus ──▶ statuspush ── UpdatePushed ──▶ installer
//
// On the boot that creates the cluster, Membership carries the bootstrap
// data (owner key, configuration, keys) instead of credentials: the
// controlplane starts etcd as a new cluster, writes the cluster's initial
// state and issues the node's certificate (bootstrap.go) before it starts
// the curator.
//
// # Restarting on a change
//
// A worker that depends on a value for what it builds (the controlplane on
// the ConsensusMember role and on the node's address, the Kubernetes
// workers on their role, the address and the etcd member) starts its
// subtree for the value it read, then keeps watching; when the value
// changes in a way that matters, it returns errInputChanged. Its supervisor
// cancels the subtree and runs the worker again, after the short backoff of
// a healthy runnable, on the new value. These workers share that loop
// (nodeInputs.runFor). Workers that only use a value once (the
// credentials, the ClientConn) simply fail when what they hold stops
// working, and find the new one when they run again.
//
// # Roles that survive a cold cluster
//
// rolefetch keeps a copy of the node's roles in data/node/roles.pb. At
// boot the role server starts from that copy, so a consensus member whose
// whole cluster was down brings its etcd and curator up without first asking
// a curator, which would not answer. Only a node that never had a copy
// starts from Membership.InitialRoles.
//
// # Owner trust
//
// ownertrust follows Curator.WatchOwnerTrust and publishes OwnerTrust, by
// which node management judges the owner's certificates: a rotated owner key
// or a revoked certificate is refused there as soon as one stream message
// arrives. It keeps a copy in data/node/owner_trust.pb and starts from it (or,
// on the boot that creates the cluster, from the bootstrap owner key), so
// that the owner can read the logs of a node that no curator answers.
//
// # Rollouts
//
// A cluster rollout gives each node in turn a desired release
// (Node.desired_release). rolefetch reads it from the stream that brings
// the node's roles and publishes it; the role server does not act on it.
// What installs releases (the update child of cmd/init, through
// node/update) does, and tells the role server how it goes
// (SetUpdateStatus); statuspush pushes that in the node's status, where
// the curator leader reads it to end the node's step. Before the node
// reboots for a trial, the installer waits for UpdatePushed to show the
// cluster heard that the trial begins.
//
// # Leaving consensus
//
// When the ConsensusMember role goes, the controlplane stops the curator at
// once, but keeps the etcd member running until the curator has removed it
// from the cluster: a member that just stopped could cost a small cluster
// its quorum, and with it the very removal. etcd then ends with
// ErrMemberRemoved, and the controlplane wipes its data directory. A stale
// local copy of the roles therefore never wipes a live member either. etcd
// may also learn of its removal before the roles arrive; the controlplane
// then wipes the data and waits for the role to change.
package roleserve
