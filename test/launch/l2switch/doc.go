// Package l2switch is the test network's own Ethernet switch, in user
// space: it joins qemu's network cards to each other and to the host, and
// impairs the links between them (delay and jitter, loss, duplication,
// reordering, partitions) with random numbers seeded so that a failing
// run can be replayed.
//
//	                  ingress: a goroutine per port
//	qemu node0 ─UDP─▶ port node0 ─┐ learns the source address, finds
//	qemu node1 ─UDP─▶ port node1 ─┤ the destination's port, or floods
//	br0 ──tap──▶ port host ───────┘ to every other port
//	                                 │ one link per (from, to), with its
//	                                 │ own random numbers: loss and
//	                                 │ duplication decided at once,
//	                                 │ delay, jitter and reordering
//	                                 ▼ through the destination's queue
//	                  egress: a goroutine per port, frames by due time
//	port node1 ─UDP─▶ qemu node1     port host ──tap──▶ br0     ...
//
// # Why in user space
//
// The kernels of the machines the tests run on have no netem, and CI
// runners often have neither netem nor the rights to configure it. A
// switch of our own goes wherever the tests go, behaves the same
// everywhere, is driven from the test itself (Partition, Heal,
// SetLinkImpairment) and draws its decisions from a seed the test
// prints.
//
// # Links
//
// A link is one direction between two ports: node0 → node1 is one,
// node1 → node0 another, each with its impairment (the Config's Profile,
// or SetLinkImpairment's) and its own PCG random numbers, seeded with the
// Profile's seed and the two ports' names. A frame that several ports
// receive (a broadcast, or a destination not learnt yet) crosses each of
// their links on its own. The switch never changes a frame.
//
// For each frame, a link that impairs anything draws five numbers, in the
// same order whatever the outcome: loss, duplication, reordering, and the
// delays of the frame and of its copy. So with the same seed the k-th
// frame of a link meets the same fate in every run. Which frame is the
// k-th depends on the machines, which are not deterministic; a replay
// repeats the network's decisions, not the guests'.
//
// Jitter spreads delays over Delay ± Jitter but keeps each link's order:
// a frame that drew a shorter delay than the one before it leaves right
// after that one. Only Reorder reorders: a reordered frame waits outside
// the order, Delay + Jitter longer (at least MinReorderHold), and the
// frames sent after it overtake it.
//
// A link with neither delay nor jitter nor reordering hands its frames
// to the destination port at once, from the goroutine that read them;
// other frames wait in the destination port's queue (at most MaxQueued),
// from which the port's egress goroutine writes each when it is due.
//
// # Partitions
//
// Partition cuts a set of ports off from the others, at once: frames
// already on their way across the cut are dropped when due. Heal joins
// them again. MAC addresses stay learnt throughout, as a real switch
// between two cut cables keeps them.
//
// # Ports
//
// AttachDgram takes qemu's -netdev dgram: one UDP datagram per frame,
// between two fixed addresses, no connection to manage, and no
// back-pressure: like a real network, a machine that does not keep up
// drops frames. AttachFrames takes anything whose reads and writes carry
// one frame each, such as the tap that joins the switch to the kernel's
// bridge on the host side (test/launch/netns).
package l2switch
