package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

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
	// scaleWide is how many enrol at once for the throughput: enough that
	// the curators, not the callers' waiting, set the rate.
	scaleWide        = 128
	scaleBeatPeriod  = 5 * time.Second
	scaleBeatRounds  = 3
	scalePutDuration = 3 * time.Second
)

// BenchmarkScale runs a control plane of three curators on a 3-member etcd
// and 1000 simulated nodes, which dial the curators in turn (so that two
// thirds of the calls are forwarded): each registers, is approved, commits,
// then heartbeats every 5 s for three rounds (after one untimed beat that
// opens its connection). Every iteration builds a fresh cluster (untimed),
// so that b.N > 1 repeats the same measurement.
//
// It reports enrolments per second, each phase of an enrolment apart
// (key generation, TLS handshake, RegisterNode, ApproveNode, CommitNode:
// mean latency under 32 enrolments at once), the etcd writes of the
// enrolments counted by etcd itself in the same window (write
// transactions from the store's revision, keys from etcd_mvcc_put_total),
// heartbeat latency in three windows of three rounds each (on their own,
// while more nodes enrol all along, with that window also split by the
// curator dialled, and with one busy process per core beside the
// benchmark), the throughput (1000 more nodes enrolling 128 at
// once, when the curators, not the callers, set the pace), the process's
// CPU time and heap (curators, etcd and
// the simulated nodes together: they share the process), and the raw etcd
// put rate of the same run for comparison. The registration limits it
// sets are printed. One iteration takes about a minute; run it with
// -benchtime=1x.
func BenchmarkScale(b *testing.B) {
	for range b.N {
		b.StopTimer()
		sc := newScaleCluster(b)
		b.StartTimer()
		sc.run(b)
	}
}

// A scaleCluster is one iteration's control plane.
type scaleCluster struct {
	c      *testCluster
	addrs  []string
	owners []api.ManagementClient
	ticket []byte
}

// newScaleCluster starts three curators on a 3-member etcd.
func newScaleCluster(b *testing.B) *scaleCluster {
	ports := &peerPorts{}
	// All simulated nodes register from 127.0.0.1, and all at once: the
	// per-source rate and the cap on nodes in NEW would measure themselves.
	const maxNew = scaleNodes
	fmt.Printf("scale: limits: RegisterNode rate per source off, at most %d nodes in NEW\n", maxNew)
	c := newTestCluster(b, ports.option(), WithMaxNewNodes(maxNew), withLimits(func(l *limits) { l.registerInterval = 0 }))
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	for range 2 {
		c.addMember(b, n0.addr.String(), newTestNode(b), ports)
	}
	waitLeader(b, c.nodes[1], c.nodes[1].addr.String(), "")
	sc := &scaleCluster{c: c, addrs: make([]string, len(c.nodes)), owners: make([]api.ManagementClient, len(c.nodes))}
	for i, n := range c.nodes {
		sc.addrs[i] = n.addr.String()
		sc.owners[i] = c.mgmt(b, sc.addrs[i])
	}
	ticket, err := sc.owners[0].GetRegisterTicket(fixture.Context(b), &api.GetRegisterTicketRequest{})
	if err != nil {
		b.Fatalf("GetRegisterTicket: %v", err)
	}
	sc.ticket = ticket.Ticket
	return sc
}

// enrolPhase names the timed phases of one enrolment.
var enrolPhase = [...]string{"keygen", "tls", "register", "approve", "commit"}

// run enrols the nodes, makes them beat, and reports.
func (sc *scaleCluster) run(b *testing.B) {
	ctx := fixture.Context(b)
	c, addrs := sc.c, sc.addrs
	etcd := c.nodes[0].member.WaitVoter(b).Client()
	rev0, puts0 := etcdWrites(b, etcd)
	cpu0 := cpuTime()
	start := time.Now()
	sims := make([]*testNode, scaleNodes)
	phases := make([][len(enrolPhase)]time.Duration, scaleNodes)
	var retries atomic.Int64
	parallel(b, scaleNodes, func(i int) error {
		n, err := sc.enrol(ctx, b, i, &phases[i], &retries)
		sims[i] = n
		return err
	})
	enrol := time.Since(start)
	cpuEnrol := cpuTime() - cpu0
	rev1, puts1 := etcdWrites(b, etcd)

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
	cpu1 := cpuTime()
	beatStart := time.Now()
	latencies := slices.Concat(beat(b, clients, len(addrs))...)
	beatCPU := cpuTime() - cpu1
	beatWall := time.Since(beatStart)

	// The same beats while more nodes enrol all along, then on a loaded
	// machine.
	enrolling, stopEnrolling := context.WithCancel(ctx)
	var late atomic.Int64
	var lateRetries atomic.Int64
	lateErr := make(chan error, 1)
	lateStart := time.Now()
	go func() { lateErr <- sc.enrolUntil(enrolling, b, scaleNodes, &late, &lateRetries) }()
	etcdLeader := sc.etcdLeader(b)
	lateByCurator := beat(b, clients, len(addrs))
	lateLatencies := slices.Concat(lateByCurator...)
	if sc.etcdLeader(b) != etcdLeader {
		etcdLeader = -1 // it moved during the window: no split to report
	}
	stopEnrolling()
	if err := <-lateErr; err != nil {
		b.Fatalf("enrolling while the nodes beat: %v", err)
	}
	lateWall := time.Since(lateStart)
	stop := fixture.Busy(b, runtime.NumCPU())
	loadedLatencies := slices.Concat(beat(b, clients, len(addrs))...)
	stop()

	// The throughput: as many more nodes, scaleWide at once.
	var wideRetries atomic.Int64
	cpu2 := cpuTime()
	wideStart := time.Now()
	parallel(b, scaleNodes, func(i int) error {
		var phases [len(enrolPhase)]time.Duration
		_, err := sc.enrol(ctx, b, i, &phases, &wideRetries)
		return err
	}, scaleWide)
	wide := time.Since(wideStart)
	cpuWide := cpuTime() - cpu2

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	puts := putRate(b, c)

	for _, l := range [][]time.Duration{latencies, lateLatencies, loadedLatencies} {
		slices.Sort(l)
	}
	rate := float64(scaleNodes) / enrol.Seconds()
	b.ReportMetric(rate, "enrolments/s")
	var phaseLine []string
	for p, name := range enrolPhase {
		var sum time.Duration
		for i := range phases {
			sum += phases[i][p]
		}
		mean := sum / scaleNodes
		b.ReportMetric(float64(mean.Microseconds())/1000, name+"-ms")
		phaseLine = append(phaseLine, fmt.Sprintf("%s %v", name, mean.Round(10*time.Microsecond)))
	}
	txns := float64(rev1-rev0) / scaleNodes
	keys := (puts1 - puts0) / float64(len(c.nodes)) / scaleNodes
	wideRate := float64(scaleNodes) / wide.Seconds()
	b.ReportMetric(wideRate, fmt.Sprintf("enrolments/s-%d-at-once", scaleWide))
	b.ReportMetric(float64(retries.Load())/scaleNodes, "register-retries/enrolment")
	b.ReportMetric(txns, "etcd-txns/enrolment")
	b.ReportMetric(keys, "etcd-puts/enrolment")
	b.ReportMetric(float64(percentile(latencies, 50).Microseconds())/1000, "hb-p50-ms")
	b.ReportMetric(float64(percentile(latencies, 99).Microseconds())/1000, "hb-p99-ms")
	b.ReportMetric(float64(percentile(lateLatencies, 99).Microseconds())/1000, "hb-p99-enrolling-ms")
	b.ReportMetric(float64(percentile(loadedLatencies, 99).Microseconds())/1000, "hb-p99-loaded-ms")
	b.ReportMetric(cpuEnrol.Seconds()/enrol.Seconds(), "enrol-cpu-cores")
	b.ReportMetric(beatCPU.Seconds()/beatWall.Seconds(), "heartbeat-cpu-cores")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(puts, "etcd-puts/s")
	// Printed, not logged: a benchmark's log is cut after ten lines, and
	// etcd's members fill those.
	fmt.Printf("scale: %d nodes enrolled in %v (%.0f/s, %v CPU); mean per phase, %d at once: %s\n", scaleNodes, enrol.Round(time.Millisecond), rate, cpuEnrol.Round(time.Millisecond), scaleConcurrency, strings.Join(phaseLine, ", "))
	fmt.Printf("scale: %d more nodes enrolled %d at once in %v (%.0f/s, %v CPU, %d Aborted and retried)\n", scaleNodes, scaleWide, wide.Round(time.Millisecond), wideRate, cpuWide.Round(time.Millisecond), wideRetries.Load())
	fmt.Printf("scale: etcd writes per enrolment, counted by etcd over the enrolments: %.2f write transactions (revisions), %.2f keys put (etcd_mvcc_put_total / %d members); %d registrations Aborted and retried\n", txns, keys, len(c.nodes), retries.Load())
	fmt.Printf("scale: %d heartbeats over %v (%v CPU), p50 %v, p99 %v; heap in use %d MiB; raw etcd puts %.0f/s\n",
		len(latencies), beatWall.Round(time.Millisecond), beatCPU.Round(time.Millisecond),
		percentile(latencies, 50), percentile(latencies, 99), ms.HeapInuse>>20, puts)
	fmt.Printf("scale: the same heartbeats while more nodes enrolled all along (%d in %v, %.0f/s, %d Aborted and retried): p50 %v, p99 %v\n",
		late.Load(), lateWall.Round(time.Millisecond), float64(late.Load())/lateWall.Seconds(), lateRetries.Load(),
		percentile(lateLatencies, 50), percentile(lateLatencies, 99))
	fmt.Printf("scale: the same heartbeats with %d busy processes beside the benchmark: p50 %v, p99 %v\n",
		runtime.NumCPU(), percentile(loadedLatencies, 50), percentile(loadedLatencies, 99))
	sc.printByCurator(b, lateByCurator, etcdLeader)
}

// etcdLeader returns the index of the curator whose etcd member leads.
func (sc *scaleCluster) etcdLeader(b *testing.B) int {
	b.Helper()
	ctx := fixture.Context(b)
	for i, n := range sc.c.nodes {
		raw := n.member.WaitVoter(b).RawClient()
		st, err := raw.Status(ctx, raw.Endpoints()[0])
		if err != nil {
			b.Fatalf("asking etcd member %d for its status: %v", i, err)
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	b.Fatal("no etcd member says it leads")
	return -1
}

// printByCurator prints the heartbeat latencies while nodes enrolled for
// each curator dialled, with what it is: a curator checks its caller with
// a linearizable read on its own etcd member (revoke.go), which on a
// follower waits for a round trip to etcd's leader and for its own apply,
// and a curator that does not lead forwards the call to the one that does.
// etcdLeader is -1 when etcd's leadership moved during the window.
func (sc *scaleCluster) printByCurator(b *testing.B, byCurator [][]time.Duration, etcdLeader int) {
	leader := waitLeader(b, sc.c.nodes[0], sc.addrs[0], "")
	for i, l := range byCurator {
		var what []string
		switch {
		case etcdLeader < 0:
			what = append(what, "etcd's leadership moved meanwhile")
		case i == etcdLeader:
			what = append(what, "beside etcd's leader")
		default:
			what = append(what, "beside an etcd follower")
		}
		if sc.c.nodes[i].id() == leader {
			what = append(what, "leads")
		} else {
			what = append(what, "forwards to the leader")
		}
		sorted := slices.Sorted(slices.Values(l))
		fmt.Printf("scale:   heartbeats while enrolling through curator %d (%s): %d, p50 %v, p99 %v\n",
			i, strings.Join(what, ", "), len(sorted), percentile(sorted, 50), percentile(sorted, 99))
	}
}

// enrol enrols simulated node i through the curators in turn: key
// generation, TLS, RegisterNode (retried when Aborted, counted in
// retries), ApproveNode by the owner, CommitNode; each phase's time goes
// to phases.
func (sc *scaleCluster) enrol(ctx context.Context, b *testing.B, i int, phases *[len(enrolPhase)]time.Duration, retries *atomic.Int64) (*testNode, error) {
	c, addrs, owners := sc.c, sc.addrs, sc.owners
	t := time.Now()
	lap := func(p int) {
		now := time.Now()
		phases[p] = now.Sub(t)
		t = now
	}
	n := &testNode{key: identitytest.NewKey(b), joinKey: identitytest.NewKey(b)}
	lap(0)
	addr := addrs[i%len(addrs)]
	creds, err := rpc.EphemeralCredentials(c.ca, n.key)
	if err != nil {
		return nil, err
	}
	conn := dial(b, addr, creds)
	defer conn.Close()
	if err := connect(ctx, conn); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	cur := api.NewCuratorClient(conn)
	lap(1)
	// Registrations that race for the cap on nodes in NEW are Aborted
	// and retried at once, as a node's enrolment does.
	for {
		_, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: sc.ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)})
		if status.Code(err) == codes.Aborted {
			retries.Add(1)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("RegisterNode: %w", err)
		}
		break
	}
	lap(2)
	if _, err := owners[i%len(owners)].ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
		return nil, fmt.Errorf("ApproveNode: %w", err)
	}
	lap(3)
	res, err := cur.CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		return nil, fmt.Errorf("CommitNode: %w", err)
	}
	lap(4)
	if err := setIdentity(n, res); err != nil {
		return nil, err
	}
	return n, nil
}

// enrolUntil enrols new simulated nodes, numbered from first on, with
// scaleConcurrency at once until ctx ends, and counts them in done.
func (sc *scaleCluster) enrolUntil(ctx context.Context, b *testing.B, first int, done, retries *atomic.Int64) error {
	next := atomic.Int64{}
	next.Store(int64(first))
	errs := make(chan error, scaleConcurrency)
	for range scaleConcurrency {
		go func() {
			for ctx.Err() == nil {
				var phases [len(enrolPhase)]time.Duration
				if _, err := sc.enrol(ctx, b, int(next.Add(1)-1), &phases, retries); err != nil {
					if ctx.Err() != nil {
						break
					}
					errs <- err
					return
				}
				done.Add(1)
			}
			errs <- nil
		}()
	}
	var firstErr error
	for range scaleConcurrency {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// beat makes every client beat once per period, spread evenly over it,
// for scaleBeatRounds rounds, and returns the latencies by the curator
// the client dials (client i dials curator i mod curators).
func beat(b *testing.B, clients []api.CuratorClient, curators int) [][]time.Duration {
	ctx := fixture.Context(b)
	var mu sync.Mutex
	latencies := make([][]time.Duration, curators)
	start := time.Now()
	parallel(b, len(clients), func(i int) error {
		offset := scaleBeatPeriod * time.Duration(i) / time.Duration(len(clients))
		for round := range scaleBeatRounds {
			at := start.Add(offset + time.Duration(round)*scaleBeatPeriod)
			time.Sleep(time.Until(at))
			t0 := time.Now()
			if _, err := clients[i].Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
				return fmt.Errorf("Heartbeat: %w", err)
			}
			d := time.Since(t0)
			mu.Lock()
			latencies[i%curators] = append(latencies[i%curators], d)
			mu.Unlock()
		}
		return nil
	}, len(clients))
	return latencies
}

// connect makes conn open its connection (the TLS handshake included) and
// waits until it is ready.
func connect(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection %s", s)
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// etcdWrites reads etcd's own count of writes: the store's revision (one
// per write transaction, through cl) and etcd_mvcc_put_total, the keys put
// by every member of the process together.
func etcdWrites(b *testing.B, cl clientv3.KV) (rev int64, puts float64) {
	b.Helper()
	res, err := cl.Get(fixture.Context(b), "scale-bench-revision")
	if err != nil {
		b.Fatalf("reading etcd's revision: %v", err)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatalf("gathering etcd's metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_put_total" {
			for _, m := range mf.GetMetric() {
				puts += m.GetCounter().GetValue()
			}
		}
	}
	return res.Header.Revision, puts
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
