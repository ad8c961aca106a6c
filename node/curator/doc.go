// Package curator is the cluster's management service: it keeps the
// state of the cluster (its nodes, the owner key, the register ticket and
// the cluster configuration) in etcd, and serves AAA, Management and
// Curator over gRPC on port 7833 of every consensus member.
package curator
