// Package consensus runs the node's etcd member, embedded in the node's own
// process, and hands the rest of the node namespaced clients to it.
//
// etcd holds the cluster's state and its CAs (package pki). Its members
// talk to each other with mutual TLS on port 7834 of the node IP; clients
// reach it only through a local unix socket, so there is no client port to
// secure at all.
//
// # Peer trust: a CA of its own
//
// etcd's raft transport takes a sender's identity from URLs and headers,
// not from its certificate: whoever passes the peer port's TLS handshake
// can join the raft streams and read every replicated write, the CA keys
// and every node's cluster unlock key among them. So the peer port must
// accept current members and nobody else, and two CAs live in etcd:
//
//	cluster CA  pki/           node and owner certificates, the
//	                           curator's gRPC; never trusted on 7834
//	peer CA     etcd-peer-pki/ etcd peer certificates only; the one CA
//	                           the peer port trusts, with its CRL
//
// The peer CA issues a certificate only to a member being added
// (AddLearner) or bootstrapped, and RemoveMember revokes it. A node or
// owner certificate fails the peer handshake; a removed member's is
// refused by the CRL check right after it.
//
// # Bootstrapping: the CAs that live in etcd
//
// Peer TLS needs a CA, and the CA lives in etcd. The first member breaks the
// circle by starting once without peer TLS, on localhost only, where no
// other member could reach it anyway:
//
//	empty DataDir, no Join
//	   │
//	   ▼
//	start etcd: peers http://127.0.0.1:7834 (no TLS), clients unix socket
//	   │  pki.Ensure: cluster CA    (pki/certs/ca/...)
//	   │  pki.Ensure: peer CA       (etcd-peer-pki/certs/ca/...)
//	   │  pki.Ensure: own peer cert (etcd-peer-pki/certs/etcd-peer-<name>/...)
//	   │  MemberUpdate: advertise https://<node IP>:7834
//	   ▼
//	stop etcd, write DataDir/peer-tls/{ca.pem (peer CA), crl.der,
//	peer-key.pem, peer.pem}; peer.pem last, its presence means
//	"bootstrapped"
//	   │
//	   ▼
//	start etcd: peers https://<node IP>:7834, mTLS against the peer CA
//	(and its CRL); every later start begins here
//
// Each step is idempotent, so a crash anywhere before peer.pem is written
// just runs the bootstrap again on the same data.
//
// # Joining: learners and their promotion
//
//	new node                               running voting member
//	   │ name, https://<IP>:7834, public key  │
//	   │ ───────(through the curator)───────▶ │ Status.AddLearner:
//	   │                                      │   peer CA issues a peer cert
//	   │                                      │   for the key
//	   │                                      │   MemberAddAsLearner
//	   │ ◀──────────── JoinCluster ────────── │   (initial cluster, peer CA,
//	   │                                      │    CRL, peer certificate)
//	   ▼
//	Config.Join: write peer-tls/, start etcd with ClusterState=existing
//	   │ replicates as a learner (no vote, serializable reads only)
//	   ▼
//	leader's membership worker: MemberPromote every learner, with a
//	backoff per learner, until etcd accepts (it refuses until the learner
//	has caught up) ──▶ voting member; Status.Learner turns false
//
// A node's own private key never leaves it: AddLearner takes its public key.
// RemoveMember removes a member and revokes its peer certificate on the
// peer CA; the crl worker keeps the CRL file etcd checks peers against
// current, a few seconds behind (crlGrace), so that the removed member can
// still be told over peer TLS that it is out, and stop, instead of being
// cut off first.
//
// # Snapshots and restoring a backup
//
// Status.Snapshot copies etcd's snapshot, taken after a linearizable read,
// into a file in DataDir, for the curator's Management.Backup. A backup
// comes back through StageRestore, which checks it (its size, its SHA-256,
// and that it holds the node's own cluster CA) and keeps it in
// DataDir/restore/. The next Run restores it before etcd starts, as a new
// cluster of this member alone, for a cluster that lost its quorum for good:
//
//	restore/backup.db (staged)
//	   │ prepare, begun again from scratch until restore/prepared exists:
//	   │   etcd's snapshot restore into restore/etcd: this member alone,
//	   │     a new cluster token (so a new cluster ID), revision + 10⁹
//	   │   start it with localhost peers and no TLS, as a bootstrap does
//	   │   lost members: every other holder of a peer certificate
//	   │   delete the peer CA; a new one, and this member's certificate
//	   │   put consensus/restored {member, lost members, revision}
//	   │   advertise https://<node IP>:7834; stop; write restore/peer-tls/
//	   ▼
//	swap, which looks at what is where, so that it resumes after a crash:
//	   etcd/, peer-tls/ ──▶ before-restore/   restore/etcd ──▶ etcd/
//	   restore/peer-tls/* ──▶ peer-tls/ (peer.pem last); the removal
//	   marker and restore/ go
//	   ▼
//	start as usual, with peer TLS
//
// The curator reads consensus/restored (PendingRestore), decommissions the
// lost members and removes the record (FinishRestore). The new cluster ID
// and the new peer CA keep the lost members' etcd and the restored one
// apart in both directions. docs/recovery.md is the operator's side.
//
// # Runnables
//
//	consensus (Run)             etcd itself; Status; returns when etcd stops
//	├── membership              Learner flag in Status; promotion on leader
//	└── crl                     peer-tls/crl.der follows revocations
//
// # When etcd wants to exit
//
// The node must survive its etcd. etcd reports its fatal conditions by
// logging at Fatal level (zap then calls os.Exit) or Panic level. Its
// logger here is built by this package (etcd's logs go into the logtree,
// see logCore), with hooks that record the message and end only the
// offending goroutine (runtime.Goexit) or, while we are starting etcd,
// panic back into our own recover. Run then returns an error to its
// supervisor, which restarts it. A member removed from the cluster while
// running stops its server: Run sees it, marks DataDir as removed and
// returns ErrMemberRemoved, now and on every restart, instead of exiting.
// A member removed while its etcd was down learns it on its next start:
// its peers either tell it (its server stops, as above) or, once their
// CRL lists its certificate, close its connections without a word, and
// it would wait for a leader forever; so a start that takes long asks the
// peers itself (probe.go) and ends the same way.
//
// Our own goroutines avoid etcd calls that panic in ordinary situations
// (EtcdServer.IsLearner panics once the member has been removed; the
// membership worker reads the member list instead).
//
// What cannot be guarded in-process: a runtime panic (not a log call) in a
// goroutine that etcd started ends the process, as Go offers no way to
// recover another goroutine's panic. Only running etcd in a child process
// would contain that; this package does not.
package consensus
