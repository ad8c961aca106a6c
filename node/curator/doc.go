// Package curator is the cluster's management service. Every consensus
// member runs one on port 7833; together they keep the cluster's state in
// etcd and serve AAA (ownership), Management (the owner's API) and
// Curator (the nodes' API).
//
// # One leader, many doors
//
// Curators elect a leader through etcd (go.etcd.io/etcd/client/v3/
// concurrency, a session lease of DefaultElectionTTL, 4 s). The candidacy's value names the
// curator, "<node id> <ip:port>", so every curator knows where the leader
// is. Clients may dial any curator:
//
//	client ──mTLS──▶ curator (follower)
//	                   │ rpc layer: authorize the caller
//	                   │ interceptor: not leading ─▶ forward, as the caller
//	                   ▼
//	                 curator (leader) ──etcd txn──▶ state under "curator/"
//	                   │ rpc layer: trusts the follower (a consensus member)
//	                   │   to name the caller; authorizes the caller again
//	                   ▼
//	                 handler
//
// Followers forward every call but three, over a connection made with
// their own node certificate, naming the original caller in a metadata
// header (rpc.WithForwardedPeer). The leader accepts that header only from
// a node that holds the ConsensusMember role: such a node can read the CA's
// key from etcd anyway, so trusting it grants nothing new. AAA.Escrow and
// Management.RotateOwnerKey are served by the curator the owner dialled,
// since their proofs are bound to that TLS session; GetCurrentLeader is
// each curator's own view of the election.
// While no curator leads, a call waits a few seconds for an election to end
// and is then refused with Unavailable.
//
// A curator that stops revokes its lease, so another takes over at once.
// One that crashed leaves a candidacy whose lease lives on for up to 4 s
// (more when etcd lost its leader with it: a new etcd leader renews every
// lease once as it takes over);
// when it starts again it deletes its own stale candidacies first, instead
// of waiting for (or following) its own ghost.
//
// # State in etcd
//
//	curator/nodes/<node id>       private.Node (keys, state, roles, status)
//	curator/owner/public_key      the owner key the cluster was bootstrapped with
//	curator/owner/trust           api.OwnerTrust: the current owner key and
//	                              the revoked owner certificates (state_owner.go)
//	curator/owner/certificates    the owner certificates issued, unexpired
//	curator/register_ticket       the secret RegisterNode checks
//	curator/configuration         api.ClusterConfiguration
//	curator/heartbeats            private.Heartbeats: when leaders last
//	                              heard from each node
//	curator/election/<lease>      candidacies
//	pki/...                       the cluster CA and issued certificates
//	consensus/restored            a restore of a backup the curator has
//	                              not finished yet (state_restore.go)
//
// Bootstrap writes the bootstrapping node's record, the bootstrap owner
// key, the register ticket and the configuration; the first curator to
// start creates curator/owner/trust from that owner key. Every change of a node
// is a transaction that compares the record's revision with the one read,
// and retries when someone else wrote in between, so concurrent calls never
// lose updates.
//
// # Heartbeats and health
//
// Every UP node beats to the leader once per heartbeat interval (5 s). The
// leader keeps the time of each beat in memory and writes all of them as
// one private.Heartbeats (curator/heartbeats) once per interval, if any
// changed (it reads the JSON object older builds wrote there, once):
// heartbeats of any number of nodes cost etcd one write per interval, never
// one per beat. A new leader loads that record when it takes over, so it
// knows when its predecessors last heard from a node that is gone (at most
// one interval earlier than they did: the last write may not have
// happened).
//
//	node ──Heartbeat──▶ leader: seen[node] = now (memory)
//	                      │ every interval, if changed: one txn,
//	                      │ put if the key's revision is the one last seen
//	                      ▼
//	                    curator/heartbeats ──load when taking the lead──▶ next leader
//
// GetNodes judges the health of each UP node from these times: HEALTHY when
// a leader heard from it within the heartbeat timeout (two intervals), else
// HEARTBEAT_TIMEOUT. A new leader says UNKNOWN about a node it has not heard
// from itself until one and a quarter intervals have passed since it took
// over: by then every live node has found it and beaten. A node that no
// leader ever heard from is UNKNOWN as well. The node of a leader that died
// is HEARTBEAT_TIMEOUT once its lease expired (4 s), the next leader was
// elected and that grace passed: about 13 s, within two heartbeat timeouts.
// Nodes give up on a beat after half an interval (roleserve), so that a beat
// sent to the dead leader does not keep them from the next one in time.
//
// Watch streams of nodes carry the same health. A node's health changes
// without a write to etcd, so the leader judges every node once per quarter
// interval (health.go, one ticker for all streams) and publishes the
// judgement when a node's changed; each stream sends those nodes again,
// read at the revision it sent. Health lives in the leader's memory, so a
// curator that stops leading ends the streams of nodes it serves.
//
// # Node lifecycle
//
//	RegisterNode (ticket, self-signed node key)  ─▶ NEW
//	Management.ApproveNode                       ─▶ STANDBY
//	CommitNode (self-signed node key)            ─▶ UP: node certificate,
//	                                                cluster unlock key
//	JoinNode (self-signed join key), each boot   ─▶ cluster unlock key
//	Management.DecommissionNode                  ─▶ DECOMMISSIONED: JoinNode
//	                                                refused for ever
//
// # Files
//
// The data model apart from the API, as in Monogon's curator: a state_*.go
// file reads and writes one part of the state in etcd, an impl_*.go file
// holds the RPC handlers of one service or concern, which judge a call and
// then use the state files (the streams follow etcd's watch themselves,
// and the leader's judgement of health).
// The rest is the machinery around them.
//
//	           client
//	             │ mTLS (node/rpc: authorize)
//	             ▼
//	curator.go, forward.go, election.go, revoke.go, limits.go
//	             │ leading: serve here; following: forward
//	             ▼
//	impl_aaa.go, impl_management*.go, impl_curator*.go, impl_kubernetes.go
//	             │ reads and writes
//	             ▼
//	state*.go ──txn──▶ etcd (curator/, pki/, kubernetes-pki/)
//
//	curator.go                  Config, options, Service.Run: one run
//	election.go                 the leader election, who leads
//	forward.go                  interceptors: serve, or forward to the leader
//	revoke.go                   a node certificate honoured only while UP
//	limits.go                   the limits on callers and their quotas
//	metrics_export.go           the curator's Prometheus metrics
//	health.go                   the leader's judgement of node health,
//	                            published for Watch streams
//	impl_aaa.go                 AAA.Escrow
//	impl_management.go          Management: ticket, cluster info, nodes,
//	                            roles, registries
//	impl_management_owner.go    Management: owner key and certificates
//	impl_management_backup.go   Management.Backup
//	impl_management_metrics.go  Management.IssueMetricsCertificate
//	impl_management_release.go  Management.UpdateReleaseKeys: the release
//	                            keys the cluster trusts
//	impl_curator.go             Curator: enrolment, status, certificates,
//	                            consensus join, heartbeats
//	impl_curator_watch.go       Curator's streams: Watch, WatchOwnerTrust,
//	                            GetCurrentLeader
//	impl_kubernetes.go          Kubernetes certificates, service account key
//	state.go                    the key layout in etcd, compare-and-put
//	state_bootstrap.go          Bootstrap: the state of a new cluster
//	state_node.go               node records: read, list, update, delete
//	state_enrolment.go          RegisterNode's and CommitNode's reads and
//	                            writes
//	state_ticket.go             the register ticket
//	state_configuration.go      the cluster configuration
//	state_owner.go              the owner trust and owner certificates
//	state_pki.go                node and owner certificates of the CA
//	state_kubernetes.go         the Kubernetes CA, service account key
//	state_heartbeats.go         heartbeat times: memory, stored per interval
//	state_restore.go            finishing the restore of a backup
package curator
