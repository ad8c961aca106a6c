package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// The scale benchmark's shape: how many nodes, how many of them enrol at
// once, and how long they beat for.
const (
	scaleNodes       = 1000
	scaleConcurrency = 32
	scaleBeatPeriod  = 5 * time.Second
	scaleBeatRounds  = 3
	scalePutDuration = 3 * time.Second
)

// BenchmarkScale runs a control plane of three curators on a 3-member etcd
// and 1000 simulated nodes, which dial the curators in turn (so that two
// thirds of the calls are forwarded): each registers, is approved, commits,
// then heartbeats every 5 s for three rounds (after one untimed beat that
// opens its connection). It reports enrolments per
// second, heartbeat latency, the process's CPU time and heap (curators,
// etcd and the simulated nodes together: they share the process), and the
// raw etcd put rate of the same run for comparison. One iteration takes
// about a minute; run it with -benchtime=1x.
func BenchmarkScale(b *testing.B) {
	ports := &peerPorts{}
	// All simulated nodes register from 127.0.0.1, and all at once: the
	// per-source rate and the cap on nodes in NEW would measure themselves.
	const maxNew = scaleNodes
	b.Logf("limits: RegisterNode rate per source off, at most %d nodes in NEW", maxNew)
	c := newTestCluster(b, ports.option(), WithMaxNewNodes(maxNew), withLimits(func(l *limits) { l.registerInterval = 0 }))
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	for range 2 {
		c.addMember(b, n0.addr.String(), newTestNode(b), ports)
	}
	waitLeader(b, c.nodes[1], c.nodes[1].addr.String(), "")
	addrs := make([]string, len(c.nodes))
	owners := make([]api.ManagementClient, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr.String()
		owners[i] = c.mgmt(b, addrs[i])
	}
	ctx := fixture.Context(b)
	ticket, err := owners[0].GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		b.Fatalf("GetRegisterTicket: %v", err)
	}

	for range b.N {
		cpu0 := cpuTime()
		start := time.Now()
		sims := make([]*testNode, scaleNodes)
		parallel(b, scaleNodes, func(i int) error {
			n := &testNode{key: identitytest.NewKey(b), joinKey: identitytest.NewKey(b)}
			addr := addrs[i%len(addrs)]
			cur := c.ephemeral(b, addr, n.key)
			if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)}); err != nil {
				return fmt.Errorf("RegisterNode: %w", err)
			}
			if _, err := owners[i%len(owners)].ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
				return fmt.Errorf("ApproveNode: %w", err)
			}
			res, err := cur.CommitNode(ctx, &api.CommitNodeRequest{})
			if err != nil {
				return fmt.Errorf("CommitNode: %w", err)
			}
			if err := setIdentity(n, res); err != nil {
				return err
			}
			sims[i] = n
			return nil
		})
		enrol := time.Since(start)
		cpuEnrol := cpuTime() - cpu0

		// Heartbeats: every node beats once per period, spread evenly.
		clients := make([]api.CuratorClient, scaleNodes)
		for i, n := range sims {
			clients[i] = api.NewCuratorClient(dial(b, addrs[i%len(addrs)], rpc.NodeCredentials(n.ident)))
		}
		// One untimed beat each first, so that the TLS handshakes of the
		// new connections do not count as heartbeat latency.
		parallel(b, scaleNodes, func(i int) error {
			_, err := clients[i].Heartbeat(ctx, &api.HeartbeatRequest{})
			return err
		})
		var mu sync.Mutex
		var latencies []time.Duration
		cpu1 := cpuTime()
		beatStart := time.Now()
		parallel(b, scaleNodes, func(i int) error {
			offset := scaleBeatPeriod * time.Duration(i) / scaleNodes
			for round := range scaleBeatRounds {
				at := beatStart.Add(offset + time.Duration(round)*scaleBeatPeriod)
				time.Sleep(time.Until(at))
				t0 := time.Now()
				if _, err := clients[i].Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
					return fmt.Errorf("Heartbeat: %w", err)
				}
				d := time.Since(t0)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
			return nil
		}, scaleNodes)
		beatCPU := cpuTime() - cpu1
		beatWall := time.Since(beatStart)

		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		puts := putRate(b, c)

		slices.Sort(latencies)
		rate := float64(scaleNodes) / enrol.Seconds()
		b.ReportMetric(rate, "enrolments/s")
		b.ReportMetric(float64(percentile(latencies, 50).Microseconds())/1000, "hb-p50-ms")
		b.ReportMetric(float64(percentile(latencies, 99).Microseconds())/1000, "hb-p99-ms")
		b.ReportMetric(cpuEnrol.Seconds()/enrol.Seconds(), "enrol-cpu-cores")
		b.ReportMetric(beatCPU.Seconds()/beatWall.Seconds(), "heartbeat-cpu-cores")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(puts, "etcd-puts/s")
		b.ReportMetric(rate/puts, "enrolments-per-put")
		b.Logf("%d nodes enrolled in %v (%.0f/s, %v CPU); %d heartbeats over %v (%v CPU), p50 %v, p99 %v; heap in use %d MiB; raw etcd puts %.0f/s",
			scaleNodes, enrol.Round(time.Millisecond), rate, cpuEnrol.Round(time.Millisecond), len(latencies), beatWall.Round(time.Millisecond), beatCPU.Round(time.Millisecond),
			percentile(latencies, 50), percentile(latencies, 99), ms.HeapInuse>>20, puts)
	}
}

// parallel runs f(0..n-1) on up to width workers (scaleConcurrency by
// default) and fails b with the first error.
func parallel(b *testing.B, n int, f func(i int) error, width ...int) {
	b.Helper()
	w := scaleConcurrency
	if len(width) > 0 {
		w = width[0]
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range w {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = fmt.Errorf("node %d: %w", i, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// putRate measures raw etcd puts per second through the leader's member,
// with the same concurrency as the enrolments.
func putRate(b *testing.B, c *testCluster) float64 {
	b.Helper()
	cl := c.nodes[0].member.WaitVoter(b).Client()
	ctx, cancel := context.WithTimeout(context.Background(), scalePutDuration)
	defer cancel()
	value := string(make([]byte, 200))
	var count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range scaleConcurrency {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if _, err := cl.Put(ctx, fmt.Sprintf("bench/%d/%d", w, i), value); err == nil {
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(count.Load()) / time.Since(start).Seconds()
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100]
}
