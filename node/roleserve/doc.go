// Package roleserve is the node's role server: once enrolment hands it the
// node's Membership, it runs what the node's roles ask for (etcd and the
// curator for ConsensusMember) and keeps the node in touch with the cluster
// (roles, status, heartbeats, cluster directory), each piece a worker that
// restarts only when its own inputs change.
package roleserve
