package rpc

// LeaderTrailer is the gRPC trailer in which a curator names the curator
// leader it knows of, on every answer, errors included. A caller that
// gets Unavailable with a leader named learns that the cluster is up and
// the failure passing, not that nobody is there.
const LeaderTrailer = "cairn-curator-leader"
