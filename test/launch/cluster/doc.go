// Package cluster boots a whole Cairn cluster in qemu, the way an operator
// would build one, for the end-to-end suites and for people
// (cmd/launch-cluster): node 0 bootstraps, the owner takes ownership with
// the real cairnctl, and every other node registers, is approved and
// commits.
//
//	host (the caller's namespace)        │ network namespace (test/launch/netns)
//	                                      │
//	cairnctl --config <Dir>/cairnctl      │   br0 10.42.0.1, DHCP: node i ─▶ 10.42.0.(10+i)
//	  --endpoint 127.0.0.1:<p> ─┐         │
//	  --node-endpoint ID=...  ──┤ forwards│     node0 (bootstrap)  node1 ...  nodeN-1
//	                            └─────────┼──▶  :7833 curator      :7833      (register,
//	tests (gRPC clients) ─────────────────┼──▶  :7835 management   :7835       approve)
//	                                      │
//	<Dir>/                                │   each node: qemu (OVMF, UKI on its own disk),
//	  nodeI.img      writable disk copy   │   swtpm with state in <Dir>/nodeI.tpm,
//	  nodeI.tpm/     TPM state            │   node parameters through fw_cfg,
//	  nodeI.vars.fd  OVMF variables       │   OVMF's variables in <Dir>/nodeI.vars.fd
//	  params/        bootstrap, register  │
//	  cairnctl/      owner key, cert, CA  │
//
// # Reaching the nodes
//
// Nodes live in a namespace without a route to the host. Each node's
// curator (7833) and node management (7835) ports are forwarded from the
// host's loopback, so cairnctl and tests run in the caller's namespace
// like an operator's shell: --endpoint names a node's curator forward, and
// one --node-endpoint ID=HOST:PORT per node tells cairnctl where the
// management port of that node is, since the addresses the cluster knows
// its nodes by (10.42.0.x) mean nothing outside the namespace. Cairnctl
// and CommandLine add those flags.
//
// # The release key
//
// When make release has written the image's release key beside the image
// (ReleaseKeyFile, out/release.pub), the bootstrap parameters make the
// cluster trust it (cairnctl params bootstrap --release-key @FILE), so
// that its nodes accept the releases the same build signs. Without the
// file the cluster trusts no release key, and everything else works alike.
//
// # An impaired network
//
// Nodes are on the kernel's bridge unless Config.Switch, or else
// NetChaosEnv (CAIRN_NET_CHAOS), names a network profile: then the
// harness's own switch joins them (test/launch/l2switch), delays, loses,
// duplicates and reorders frames on every link as the profile says, and
// Network().Partition cuts nodes off until Heal. New logs the profile with
// its seed, the line that replays the run's network decisions; Close logs
// what the switch did to the frames of each port.
//
// # Lifetime
//
// A node's disk, TPM state and firmware variable store live in Dir, so a
// node survives its own reboots (the guest reboots inside the same qemu,
// whose flash keeps the variables anyway), a hard kill (Node.Kill, then
// Node.Boot again) and a power cycle of the whole cluster, boot entries
// included.
// Close kills every node and removes the network; Dir stays for the caller
// to inspect or remove.
//
// # Markers
//
// The harness follows a node by the markers it states on its console
// (node/marker), never by the wording of its log lines: node IDs come from
// the node field of the enrolment markers (bootstrapped, registering,
// waiting-for-approval, committed, joined), and Form waits on
// curator-serving, waiting-for-approval and committed.
package cluster
