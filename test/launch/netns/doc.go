// Package netns gives a test its own network for several qemu nodes: a
// network namespace that the test creates, with a bridge, one tap per node
// (or the harness's switch, which can impair the links), a DHCP server of
// the harness with fixed leases, an SNTP server with the host's time, and
// TCP port forwards from the host's loopback to the nodes.
//
//	host namespace                 │ namespace cairn-net-<pid>-<random>
//	                               │
//	cairnctl, tests                │     DHCP server (udp/67 on br0)
//	    │ 127.0.0.1:<free port>    │       fixed lease per MAC address
//	    │                          │     SNTP server (10.42.0.1:123)
//	    ▼                          │             │
//	forwarder ── dials from a ─────┼──▶ br0 10.42.0.1/24 (no default route)
//	(listens on the host)  thread  │     │           │           │
//	                    inside the │   tap0        tap1   ...  tapN
//	                     namespace │     │           │           │
//	                               │   qemu        qemu        qemu
//	                               │   52:54:00:42:00:0a       ...
//	                               │   10.42.0.10  10.42.0.11
//
// # Why a namespace
//
// Nodes need a real layer-2 network to test DHCP, addresses that other
// nodes can reach, and nothing of the host in the way. A namespace gives
// that without touching the host's own network: the bridge and taps exist
// only inside it, the namespace has no link and no route to the outside,
// and there is no NAT, so nothing the nodes send can leave it. The only way
// in is the forwarders, which listen on the host's loopback alone; a node
// sees forwarded connections come from the bridge address, 10.42.0.1.
//
// # The switch
//
// With Config.Switch, the nodes have no taps: the harness's own switch
// (test/launch/l2switch) joins them, and impairs every link as its profile
// says. Each node's qemu exchanges frames with a port of the switch as
// UDP datagrams on the namespace's loopback (-netdev dgram); one tap,
// sw0, joins the switch to the bridge, so that the host side (DHCP,
// forwards, anything listening on 10.42.0.1) is the same on either
// network. Partition and Heal cut nodes off and join them again.
//
//	br0 10.42.0.1 ── sw0 ── switch ─┬─ UDP ── qemu node0, on :20000
//	                 (tap)  port    ├─ UDP ── qemu node1, on :20001
//	                        "host"  └─ ...
//
// # DHCP
//
// The server answers only the MAC addresses of its nodes, each with its
// fixed address, the bridge as router and NTP server (option 42), the
// configured resolvers (none by default) and the configured lease time,
// short in tests that watch a renewal. Acks and WaitAcks show the host
// side of each lease: when it was granted, and whether it was a renewal.
//
// # Time
//
// The bridge address serves SNTP (pkg/sntp) with the host's clock, so
// that nodes, which have no way out of the namespace, keep time with the
// host.
//
// # Running qemu in it
//
// Taps are found by name in the namespace of the process that opens them,
// and the switch's sockets live in the namespace too, so qemu must run
// inside the network's namespace: start it through Cmd (nsenter --net), or
// from within Do (a child process inherits the namespace of the thread
// that starts it). Node(i).QEMUArgs gives the network card, on tap i or
// switch port i, with node i's MAC address; the DHCP server then leases it
// Node(i).IP. The taps belong to this process's user and group.
//
// # Lifetime
//
// Close stops the forwarders, the DHCP and SNTP servers and the switch,
// deletes the links and removes the namespace; NewForTest calls it from
// t.Cleanup, so it happens when a test fails or panics too. Namespaces
// left by a process that was killed before it could clean up carry its
// PID in their name and are removed by the next New. Close nodes before
// the network: a process still in the namespace keeps it alive.
package netns
