//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"cairn.dev/cairn/pkg/procstat"
	"cairn.dev/cairn/test/launch/cluster"
)

var churnFlag = flag.Int("churn", 0, "how many pods TestChurn starts at once across the two workers, then deletes (make bench-churn: 40); 0 skips it")

// TestChurn measures a cluster through a burst of pods, the load of the
// conformance tests that start 100 pods at once (the garbage collector's,
// the serial shard's): the cluster of make cluster, one Deployment of
// -churn pause pods (the image every worker holds, so no pull is timed),
// then its deletion. It reports how long until every pod was Ready and
// until none was left (in the API, then on the workers), when a worker's
// Node was not Ready, the apiserver's requests and their latency, how
// long its goroutines waited to run, its calls to etcd, and where each
// node's CPU time went: its processes by program, and what no living
// process shows (the programs that ran and ended, the pods' runc and CNI
// plugins among them, and the kernel's own work). It asserts
// only that the pods came and went: a benchmark, make bench-churn, not
// part of make test.
func TestChurn(t *testing.T) {
	if *churnFlag <= 0 {
		t.Skip("the churn benchmark starts and deletes dozens of pods for half an hour or more: make bench-churn runs it (or pass -churn)")
	}
	n := *churnFlag
	s := newSuite(t, 3, 90*time.Minute)
	c, k, _ := s.kubernetesCluster(t)
	nodes := []*cluster.Node{c.Node(0), c.Node(1), c.Node(2)}
	workers := nodes[1:]

	start := time.Now()
	readiness := watchReadiness(t, k, workers, start)
	defer readiness.stop()
	before := readChurn(t, s, c, k, nodes)
	// A burst the cluster does not absorb in time is what this measures
	// too: say what it went through before the test fails.
	defer func() {
		if !t.Failed() {
			return
		}
		readiness.stop()
		t.Logf("each worker's Node until the benchmark failed:\n%s", readiness.report())
		if now, err := tryReadChurn(t, s, c, k, nodes); err == nil {
			t.Logf("since the Deployment was applied %s", churnReport(before, now, nodes, time.Since(start)))
		}
	}()
	k.apply(t, fmt.Sprintf(churnDeployment, n))
	ready := 0
	// Polled every 10 s, each poll one more request of the apiserver
	// under measure.
	k.waitEvery(t, fmt.Sprintf("%d churn pods Ready", n), 40*time.Minute, 10*time.Second, func() error {
		var d struct {
			Status struct{ ReadyReplicas int }
		}
		if err := k.getJSON(t, &d, "deployment", "churn"); err != nil {
			return err
		}
		if d.Status.ReadyReplicas != ready {
			ready = d.Status.ReadyReplicas
			t.Logf("+%v: %d of %d pods Ready", time.Since(start).Round(time.Second), ready, n)
		}
		if ready < n {
			return fmt.Errorf("%d of %d pods Ready", ready, n)
		}
		return nil
	})
	up := time.Since(start)
	s.step(fmt.Sprintf("Deployment of %d pods applied → all Ready", n), up)
	mid := readChurn(t, s, c, k, nodes)

	deleted := time.Now()
	k.retry(t, "delete", "deployment", "churn", "--wait=false")
	k.waitEvery(t, "the churn pods gone from the API", 40*time.Minute, 10*time.Second, func() error {
		out, err := k.run(t, "get", "pods", "-l", "app=churn", "-o", "name")
		if err != nil {
			return err
		}
		if left := strings.Count(string(out), "\n"); left > 0 {
			return fmt.Errorf("%d pods left", left)
		}
		return nil
	})
	s.step("Deployment deleted → the API lists none of its pods", time.Since(deleted))
	for _, w := range workers {
		k.waitEvery(t, "the pods of "+w.Name()+" gone", 40*time.Minute, 10*time.Second, func() error {
			left, err := pauseProcesses(s, c, w)
			if err == nil && left > 0 {
				err = fmt.Errorf("%s runs %d pause processes", w.Name(), left)
			}
			return err
		})
		s.step("Deployment deleted → "+w.Name()+" runs none of its pods", time.Since(deleted))
	}
	down := time.Since(deleted)
	after := readChurn(t, s, c, k, nodes)
	readiness.stop()

	t.Logf("each worker's Node while the pods came and went:\n%s", readiness.report())
	for _, phase := range []struct {
		name     string
		from, to churnReading
		over     time.Duration
	}{
		{"while the pods started", before, mid, up},
		{"while they were deleted", mid, after, down},
	} {
		t.Logf("%s %s", phase.name, churnReport(phase.from, phase.to, nodes, phase.over))
	}
}

// churnReport is what the apiserver went through between two readings
// over: its requests, the latency of the kubelets' lease renewals, how
// long its goroutines waited to run, and its calls to etcd; then where
// the CPU time of each of nodes went.
func churnReport(from, to churnReading, nodes []*cluster.Node, over time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "(%v): the apiserver's requests (by verb, resource and subresource):\n%s\n  its latency of the kubelets' lease renewals (PUT leases): %s\n  how long its goroutines waited to run: %s\n  its calls to etcd, with their mean latency:\n%s",
		over.Round(time.Second),
		census(from.requests, to.requests, over, 12, "verb", "resource", "subresource"),
		histogramDelta(from.leasePUT, to.leasePUT, "renewals"),
		histogramDelta(from.sched, to.sched, "waits"),
		etcdLatency(from, to, 8))
	for i, n := range nodes {
		fmt.Fprintf(&b, "\n  %s's CPU: %s", n.Name(), cpuDelta(from.nodes[i], to.nodes[i], 8))
	}
	return b.String()
}

// churnDeployment is a Deployment of %d pause pods, which end at once when
// deleted.
const churnDeployment = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"churn"},"spec":{
	"replicas":%d,"selector":{"matchLabels":{"app":"churn"}},
	"template":{"metadata":{"labels":{"app":"churn"}},"spec":{
		"terminationGracePeriodSeconds":1,
		"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.10","imagePullPolicy":"Never"}]}}}}`

// pauseProcesses counts the pause processes of worker w: two for each of
// TestChurn's pods (its sandbox and its container), none once they are
// all gone.
func pauseProcesses(s *suite, c *cluster.Cluster, w *cluster.Node) (int, error) {
	r, err := readNodeCPU(s, c, w)
	if err != nil {
		return 0, err
	}
	left := 0
	for _, p := range r.Processes {
		if p.Name == "pause" {
			left++
		}
	}
	return left, nil
}

// nodeCPU is the part of cairnctl node resources -o json that tells where
// a node's CPU time went: its CPUs' time since it booted, busy and not,
// and each living process's CPU time since it started.
type nodeCPU struct {
	Busy      uint64           `json:"cpu_busy_millis"`
	Idle      uint64           `json:"cpu_idle_millis"`
	Stolen    uint64           `json:"cpu_stolen_millis"`
	Processes []nodeCPUProcess `json:"processes"`
}

// nodeCPUProcess is one process of a nodeCPU, with the CPU time of the
// children it reaped.
type nodeCPUProcess struct {
	PID          int32  `json:"pid"`
	Name         string `json:"name"`
	CPU          uint64 `json:"cpu_time_millis"`
	KernelThread bool   `json:"kernel_thread"`
	ParentPID    int32  `json:"parent_pid"`
	Children     uint64 `json:"children_cpu_time_millis"`
}

// cpuTimes is r's processes as procstat.Between takes them.
func (r nodeCPU) cpuTimes() []procstat.Process {
	ps := make([]procstat.Process, len(r.Processes))
	for i, p := range r.Processes {
		ps[i] = procstat.Process{
			PID: int(p.PID), Name: p.Name, KernelThread: p.KernelThread, ParentPID: int(p.ParentPID),
			CPUTime:         time.Duration(p.CPU) * time.Millisecond,
			ChildrenCPUTime: time.Duration(p.Children) * time.Millisecond,
		}
	}
	return ps
}

// readNodeCPU reads node n's CPU times and its processes.
func readNodeCPU(s *suite, c *cluster.Cluster, n *cluster.Node) (nodeCPU, error) {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	out, err := c.Cairnctl(ctx, "node", "resources", "--all", n.ID(), "-o", "json")
	if err != nil {
		return nodeCPU{}, fmt.Errorf("reading the processes of %s: %w", n.Name(), err)
	}
	var r nodeCPU
	if err := json.Unmarshal(out, &r); err != nil {
		return nodeCPU{}, fmt.Errorf("reading the processes of %s: %w", n.Name(), err)
	}
	return r, nil
}

// cpuDelta is where a node's CPU time went between two readings: how
// busy it was, as a share of its CPUs' time; the top programs by the CPU
// time their processes used, each with how many processes ran it, and
// what the children they reaped in between used ("reaped": the programs
// a kubelet or a shim ran that ended), as cairnctl node resources --over
// counts them (procstat.Between); and what was busy that neither shows:
// the programs that ran and ended that no living process reaped, and the
// kernel's own work.
func cpuDelta(from, to nodeCPU, top int) string {
	all := float64(to.Busy + to.Idle + to.Stolen - from.Busy - from.Idle - from.Stolen)
	if all <= 0 || to.Busy < from.Busy {
		return "not read (the node restarted in between, or did not report its CPU time)"
	}
	pct := func(d time.Duration) float64 { return 100 * float64(d.Milliseconds()) / all }
	type program struct {
		name          string
		cpu, children time.Duration
		count         int
	}
	byName := map[string]*program{}
	var shown time.Duration
	for _, u := range procstat.Between(from.cpuTimes(), to.cpuTimes()) {
		if u.CPU == 0 && u.Children == 0 {
			continue
		}
		g := byName[u.Name]
		if g == nil {
			g = &program{name: u.Name}
			byName[u.Name] = g
		}
		g.cpu += u.CPU
		g.children += u.Children
		g.count++
		shown += u.CPU + u.Children
	}
	programs := slices.SortedFunc(maps.Values(byName), func(a, b *program) int {
		return cmp.Or(cmp.Compare(b.cpu+b.children, a.cpu+a.children), cmp.Compare(a.name, b.name))
	})
	busy := time.Duration(to.Busy-from.Busy) * time.Millisecond
	var b strings.Builder
	fmt.Fprintf(&b, "busy %.0f %% of its CPUs' time;", pct(busy))
	for i, g := range programs {
		if i == top {
			fmt.Fprintf(&b, " %d more programs;", len(programs)-top)
			break
		}
		fmt.Fprintf(&b, " %s %.1f %% (%d)", g.name, pct(g.cpu), g.count)
		if g.children > 0 {
			fmt.Fprintf(&b, " + reaped %.1f %%", pct(g.children))
		}
		b.WriteString(";")
	}
	if busy > shown {
		fmt.Fprintf(&b, " ended unreaped and the kernel %.1f %%", pct(busy-shown))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// churnReading is what TestChurn reads of the apiserver's metrics at
// each end of a phase.
type churnReading struct {
	requests map[string]counterSample
	// etcdSum and etcdCount are the apiserver's etcd_request_duration_seconds
	// histograms' sums and counts, by operation and resource.
	etcdSum, etcdCount map[string]float64
	// leasePUT is the histogram of the latency of PUT leases.
	leasePUT *dto.Histogram
	// sched is the histogram of how long the apiserver's goroutines
	// waited to run once runnable (Go's scheduling latency).
	sched *dto.Histogram
	// nodes are the CPU times of the benchmark's nodes, in order.
	nodes []nodeCPU
}

// readChurn reads the apiserver's metrics and the CPU times of nodes,
// trying again for five minutes.
func readChurn(t *testing.T, s *suite, c *cluster.Cluster, k *kube, nodes []*cluster.Node) churnReading {
	t.Helper()
	var r churnReading
	k.waitFor(t, "the apiserver's metrics and the nodes' CPU times", 5*time.Minute, func() error {
		var err error
		r, err = tryReadChurn(t, s, c, k, nodes)
		return err
	})
	return r
}

// tryReadChurn reads the apiserver's metrics and the CPU times of nodes
// once.
func tryReadChurn(t *testing.T, s *suite, c *cluster.Cluster, k *kube, nodes []*cluster.Node) (churnReading, error) {
	text, err := k.run(t, "get", "--raw", "/metrics")
	if err != nil {
		return churnReading{}, err
	}
	families, err := parseMetrics(text)
	if err != nil {
		return churnReading{}, fmt.Errorf("the apiserver's metrics: %w", err)
	}
	r := churnReading{
		requests:  series(families, "apiserver_request_total"),
		etcdSum:   map[string]float64{},
		etcdCount: map[string]float64{},
		leasePUT:  &dto.Histogram{},
		sched:     &dto.Histogram{},
	}
	for _, m := range families["go_sched_latencies_seconds"].GetMetric() {
		r.sched = m.GetHistogram()
	}
	for _, m := range families["etcd_request_duration_seconds"].GetMetric() {
		l := labels(m)
		key := l["operation"] + " " + l["resource"]
		r.etcdSum[key] += m.GetHistogram().GetSampleSum()
		r.etcdCount[key] += float64(m.GetHistogram().GetSampleCount())
	}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		if l := labels(m); l["verb"] == "PUT" && l["resource"] == "leases" {
			r.leasePUT = m.GetHistogram()
		}
	}
	for _, n := range nodes {
		cpu, err := readNodeCPU(s, c, n)
		if err != nil {
			return churnReading{}, err
		}
		r.nodes = append(r.nodes, cpu)
	}
	return r, nil
}

// histogramDelta describes the observations of a histogram between two
// readings, what it counts named by what: how many, their mean, median,
// 90th and 99th percentiles as the upper bound of the bucket each falls
// in, and the largest bucket reached.
func histogramDelta(from, to *dto.Histogram, what string) string {
	total := float64(to.GetSampleCount() - from.GetSampleCount())
	if total <= 0 {
		return "none"
	}
	prev := map[float64]uint64{}
	for _, b := range from.GetBucket() {
		prev[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	bound := func(q float64) string {
		for _, b := range to.GetBucket() {
			le := b.GetUpperBound()
			if math.IsInf(le, 1) {
				break
			}
			if float64(b.GetCumulativeCount()-prev[le]) >= q*total {
				return "≤ " + time.Duration(le*float64(time.Second)).Round(time.Microsecond).String()
			}
		}
		return "beyond the last bucket"
	}
	mean := time.Duration((to.GetSampleSum() - from.GetSampleSum()) / total * float64(time.Second))
	return fmt.Sprintf("%.0f %s, mean %v, median %s, 90th percentile %s, 99th %s, the slowest %s",
		total, what, mean.Round(time.Microsecond), bound(0.5), bound(0.9), bound(0.99), bound(1))
}

// etcdLatency lists the top kinds of the apiserver's etcd calls between
// two readings by the time they took in all, with how many and their
// mean.
func etcdLatency(from, to churnReading, top int) string {
	type kind struct {
		name      string
		sum, mean float64
		n         float64
	}
	var kinds []kind
	for name, sum := range to.etcdSum {
		n := to.etcdCount[name] - from.etcdCount[name]
		if n <= 0 {
			continue
		}
		d := sum - from.etcdSum[name]
		kinds = append(kinds, kind{name: name, sum: d, mean: d / n, n: n})
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Or(cmp.Compare(b.sum, a.sum), cmp.Compare(a.name, b.name)) })
	var b strings.Builder
	for i, k := range kinds {
		if i == top {
			fmt.Fprintf(&b, "    (%d more kinds)", len(kinds)-top)
			break
		}
		fmt.Fprintf(&b, "    %6.0f  %-40s %7.1f s in all, mean %.3f s\n", k.n, k.name, k.sum, k.mean)
	}
	return strings.TrimRight(b.String(), "\n")
}

// readinessWatch polls whether each worker's Node is Ready, every 10 s,
// and keeps the spans it was not.
type readinessWatch struct {
	mu    sync.Mutex
	start time.Time
	// notReady are the spans each worker's Node was seen not Ready,
	// as offsets from start; an open span has no end yet (-1).
	notReady map[string][][2]time.Duration
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func watchReadiness(t *testing.T, k *kube, workers []*cluster.Node, start time.Time) *readinessWatch {
	w := &readinessWatch{start: start, notReady: map[string][][2]time.Duration{}, done: make(chan struct{})}
	w.wg.Go(func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			for _, n := range workers {
				// An apiserver that does not answer says nothing of
				// the Node: only a Ready condition other than True
				// counts.
				c, err := k.readyCondition(t, n.ID())
				w.observe(n.Name(), err == nil && c != nil && c.Status != "True")
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// observe records whether worker was seen not Ready now.
func (w *readinessWatch) observe(worker string, notReady bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Since(w.start)
	spans := w.notReady[worker]
	open := len(spans) > 0 && spans[len(spans)-1][1] < 0
	switch {
	case notReady && !open:
		w.notReady[worker] = append(spans, [2]time.Duration{now, -1})
	case !notReady && open:
		spans[len(spans)-1][1] = now
	}
}

func (w *readinessWatch) stop() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}

// report lists each worker's spans not Ready, from the start of the
// burst, to the 10 s the watch polls at.
func (w *readinessWatch) report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.notReady) == 0 {
		return "  Ready throughout"
	}
	var b strings.Builder
	for _, worker := range slices.Sorted(maps.Keys(w.notReady)) {
		spans := w.notReady[worker]
		fmt.Fprintf(&b, "  %s not Ready:", worker)
		for _, s := range spans {
			if s[1] < 0 {
				fmt.Fprintf(&b, " from +%v to the end;", s[0].Round(time.Second))
				continue
			}
			fmt.Fprintf(&b, " +%v to +%v (%v);", s[0].Round(time.Second), s[1].Round(time.Second), (s[1] - s[0]).Round(time.Second))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// TestHistogramDelta reads the observations between two readings of a
// histogram: their count, mean and percentiles by bucket, and none when
// nothing was observed.
func TestHistogramDelta(t *testing.T) {
	h := func(count uint64, sum float64, cumulative ...uint64) *dto.Histogram {
		bounds := []float64{0.1, 1, 10, math.Inf(1)}
		out := &dto.Histogram{SampleCount: &count, SampleSum: &sum}
		for i, c := range cumulative {
			out.Bucket = append(out.Bucket, &dto.Bucket{UpperBound: &bounds[i], CumulativeCount: &c})
		}
		return out
	}
	from := h(10, 1, 5, 10, 10, 10)
	to := h(110, 31, 55, 100, 109, 110)
	want := "100 renewals, mean 300ms, median ≤ 100ms, 90th percentile ≤ 1s, 99th ≤ 10s, the slowest beyond the last bucket"
	if got := histogramDelta(from, to, "renewals"); got != want {
		t.Errorf("histogramDelta =\n  %s\nwant\n  %s", got, want)
	}
	if got := histogramDelta(to, to, "renewals"); got != "none" {
		t.Errorf("histogramDelta of no observations = %q, want none", got)
	}
}

// TestCPUDelta reads where a node's CPU time went between two readings:
// a process that lived through both counts what it used in between, one
// that started counts all of its time, a PID taken again by another
// program counts as new, a kernel thread that changed its name counts
// what it used in between, a process's reaped children count what they
// used in between (procstat.Between has the cases), the programs come
// busiest first with their children, and what no process shows is the
// unreaped ended programs' and the kernel's.
func TestCPUDelta(t *testing.T) {
	kworker := func(name string, cpu uint64) nodeCPUProcess {
		return nodeCPUProcess{PID: 40, Name: name, CPU: cpu, KernelThread: true, ParentPID: 2}
	}
	// The kubelet reaped a mount of 200 ms in between; runc, which had
	// used 50 ms by the first reading, ended and a shim took its PID.
	from := nodeCPU{Busy: 1000, Idle: 9000, Processes: []nodeCPUProcess{
		{PID: 1, Name: "init", CPU: 500}, {PID: 7, Name: "kubelet", CPU: 300, ParentPID: 1, Children: 100},
		{PID: 9, Name: "runc", CPU: 50, ParentPID: 12},
		kworker("kworker/0:1-events", 4000),
	}}
	to := nodeCPU{Busy: 6000, Idle: 14000, Processes: []nodeCPUProcess{
		{PID: 1, Name: "init", CPU: 1500}, {PID: 7, Name: "kubelet", CPU: 2300, ParentPID: 1, Children: 300},
		{PID: 9, Name: "containerd-shim", CPU: 400, ParentPID: 1}, {PID: 12, Name: "containerd-shim", CPU: 600, ParentPID: 1},
		kworker("kworker/0:1-kblockd", 4500),
	}}
	want := "busy 50 % of its CPUs' time; kubelet 20.0 % (1) + reaped 2.0 %; containerd-shim 10.0 % (2); init 10.0 % (1); kworker/0:1-kblockd 5.0 % (1); ended unreaped and the kernel 3.0 %"
	if got := cpuDelta(from, to, 8); got != want {
		t.Errorf("cpuDelta =\n  %s\nwant\n  %s", got, want)
	}
	if got := cpuDelta(to, from, 8); !strings.HasPrefix(got, "not read") {
		t.Errorf("cpuDelta of a node whose times went back = %q, want not read", got)
	}
}
