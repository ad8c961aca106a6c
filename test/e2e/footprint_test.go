//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch/cluster"
)

var (
	idleFlag     = flag.Duration("idle", 0, "how long TestIdleFootprint leaves a Kubernetes cluster at rest before it reads each node's memory and CPU (make bench-idle: 10m); 0 skips it")
	idleOverFlag = flag.Duration("idle-over", 5*time.Minute, "how long TestIdleFootprint reads each node's CPU over, once the cluster has rested for -idle")
)

// TestIdleFootprint measures what a Kubernetes cluster costs at rest, the
// figures of the footprint goals: the cluster of make cluster (node 0 the
// controller, nodes 1 and 2 workers), one pause pod on each worker, every
// feature on (pod traffic through the tunnel, a NetworkPolicy selecting
// the pods, the resource metrics API answering). Once it has rested for
// -idle, each node is read twice, -idle-over apart (cairnctl node
// resources --over): its busy time in between, and each process's memory
// (PSS, which adds up across processes sharing a program) and CPU. It
// reports the figures and asserts only that the cluster worked: a
// benchmark, make bench-idle, not part of make test.
func TestIdleFootprint(t *testing.T) {
	if *idleFlag <= 0 {
		t.Skip("the idle footprint rests a cluster for minutes: make bench-idle runs it (or pass -idle)")
	}
	s := newSuite(t, 3, *idleFlag+*idleOverFlag+30*time.Minute)
	c, k, rolesGiven := s.kubernetesCluster(t)
	n0, n1, n2 := c.Node(0), c.Node(1), c.Node(2)

	// A policy for the pods, so that each worker's NetworkPolicy rules
	// are in place, not only its controller.
	k.apply(t, idlePolicy)
	for _, n := range []*cluster.Node{n1, n2} {
		name := "idle-" + n.Name()
		k.retry(t, "run", name, "--image=registry.k8s.io/pause:3.10", "--image-pull-policy=Never",
			"--restart=Never", "--labels=app=idle", `--overrides={"spec":{"nodeName":"`+n.ID()+`"}}`)
		k.waitFor(t, name+" Running", 5*time.Minute, func() error { return k.podPhase(t, name, "Running") })
	}
	s.step("roles given → a pod Running on each worker", time.Since(rolesGiven))
	k.waitFor(t, "the resource metrics API", 5*time.Minute, func() error {
		_, err := k.run(t, "top", "nodes")
		return err
	})
	s.step("roles given → kubectl top nodes answers", time.Since(rolesGiven))

	t.Logf("resting for %v, then reading each node over %v", *idleFlag, *idleOverFlag)
	select {
	case <-time.After(*idleFlag):
	case <-s.ctx.Done():
		t.Fatalf("the suite's deadline passed while the cluster rested")
	}
	nodes := []*cluster.Node{n0, n1, n2}
	before := readCalls(t, s, k, c, nodes)
	views := make([]idleView, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(s.ctx, *idleOverFlag+2*time.Minute)
			defer cancel()
			out, err := c.Cairnctl(ctx, "node", "resources", n.ID(), "--over", idleOverFlag.String(), "-o", "json")
			if err != nil {
				errs[i] = err
				return
			}
			if err := json.Unmarshal(out, &views[i]); err != nil {
				errs[i] = fmt.Errorf("when reading the resources of %s: %w", n.Name(), err)
			}
		})
	}
	wg.Wait()
	after := readCalls(t, s, k, c, nodes)
	over := after.at.Sub(before.at)
	for i, n := range nodes {
		if errs[i] != nil {
			t.Fatalf("reading %s: %v", n.Name(), errs[i])
		}
		role := "worker"
		if n == n0 {
			role = "controller"
		}
		t.Logf("%s (%s) after %v at rest:\n%s  the calls its core answered over %v (etcd's and Cairn's gRPC calls started, by method):\n%s",
			n.Name(), role, *idleFlag, views[i].report(), over.Round(time.Second),
			census(before.core[i], after.core[i], over, 12, "grpc_service", "grpc_method"))
	}
	t.Logf("the requests the apiserver answered over %v (by verb, resource and subresource):\n%s",
		over.Round(time.Second), census(before.apiserver, after.apiserver, over, 15, "verb", "resource", "subresource"))
	t.Logf("the apiserver's own calls to etcd over %v (by operation and resource):\n%s",
		over.Round(time.Second), census(before.etcd, after.etcd, over, 15, "operation", "resource"))
	// The pods ran throughout: a footprint of a cluster that broke would
	// measure nothing the goals speak of.
	for _, n := range []*cluster.Node{n1, n2} {
		if err := k.podPhase(t, "idle-"+n.Name(), "Running"); err != nil {
			t.Errorf("after the rest: %v", err)
		}
	}
}

// kubernetesCluster forms the cluster of make cluster with its
// Kubernetes roles (node 0 the controller, nodes 1 and 2 workers), writes
// the owner's kubeconfig, and waits for both workers' Nodes Ready and for
// the namespace default's service account. It returns when the roles
// were given.
func (s *suite) kubernetesCluster(t *testing.T) (*cluster.Cluster, *kube, time.Time) {
	t.Helper()
	c := s.startCluster(s.clusterConfig(3, 0))
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the cluster: %v", err)
	}
	k, rolesGiven := s.giveKubernetesRoles(t, c)
	s.cairnctl(t, c, "kubeconfig", "--out", k.config, "--apiserver", "https://"+c.Node(0).KubernetesAddr())
	for _, n := range []*cluster.Node{c.Node(1), c.Node(2)} {
		k.waitFor(t, n.Name()+"'s Node Ready", 15*time.Minute, func() error { return k.nodeReady(t, n.ID()) })
	}
	s.step("roles given → both workers' Nodes Ready", time.Since(rolesGiven))
	k.waitFor(t, "the default service account", 5*time.Minute, func() error {
		_, err := k.run(t, "get", "serviceaccount", "default")
		return err
	})
	return c, k, rolesGiven
}

// calls are the counters of the calls servers answered, read at once:
// the apiserver's requests, its own calls to etcd, and each node's core's
// gRPC calls.
type calls struct {
	at        time.Time
	apiserver map[string]counterSample
	etcd      map[string]counterSample
	core      []map[string]counterSample
}

// readCalls reads the apiserver's counters of its requests and of its
// own calls to etcd (through kubectl), and the gRPC counters of the cores
// of nodes (cairnctl node metrics).
func readCalls(t *testing.T, s *suite, k *kube, c *cluster.Cluster, nodes []*cluster.Node) calls {
	t.Helper()
	r := calls{at: time.Now()}
	text, err := k.run(t, "get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("reading the apiserver's metrics: %v", err)
	}
	families, err := parseMetrics(text)
	if err != nil {
		t.Fatalf("the apiserver's metrics: %v", err)
	}
	r.apiserver = series(families, "apiserver_request_total")
	r.etcd = series(families, "etcd_requests_total")
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		text, err := c.Cairnctl(ctx, "node", "metrics", n.ID())
		cancel()
		if err != nil {
			t.Fatalf("reading the metrics of %s: %v", n.Name(), err)
		}
		m, err := counters(text, "grpc_server_started_total", "cairn_grpc_server_started_total")
		if err != nil {
			t.Fatalf("the metrics of %s: %v", n.Name(), err)
		}
		r.core = append(r.core, m)
	}
	return r
}

// idlePolicy selects the idle pods and lets in only pods labelled as
// their clients: a policy whose rules every worker programs.
const idlePolicy = `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"idle"},"spec":{
	"podSelector":{"matchLabels":{"app":"idle"}},
	"policyTypes":["Ingress"],
	"ingress":[{"from":[{"podSelector":{"matchLabels":{"app":"idle-client"}}}],"ports":[{"protocol":"TCP","port":8080}]}]}}`

// idleView is the part of cairnctl node resources -o json the footprint
// reports.
type idleView struct {
	CPUBusyOverMillis uint64        `json:"cpu_busy_over_millis"`
	CPUAllOverMillis  uint64        `json:"cpu_all_over_millis"`
	Processes         []idleProcess `json:"processes"`
}

// idleProcess is one process of an idleView.
type idleProcess struct {
	Name              string `json:"name"`
	ProportionalBytes uint64 `json:"proportional_bytes"`
	AnonymousBytes    uint64 `json:"anonymous_bytes"`
	CPUOverMillis     uint64 `json:"cpu_over_millis"`
	// ChildrenCPUOverMillis is what the children it reaped used: the
	// programs it ran that ended (kube-proxy's nft, say).
	ChildrenCPUOverMillis uint64 `json:"children_cpu_over_millis"`
}

// report is the node's busy share of its CPUs, its processes' memory
// together, and each process that holds memory or used a percent of a
// CPU, itself or its reaped children, most memory first.
func (v idleView) report() string {
	const mib = 1 << 20
	pct := func(ms uint64) float64 {
		if v.CPUAllOverMillis == 0 {
			return 0
		}
		return 100 * float64(ms) / float64(v.CPUAllOverMillis)
	}
	var pss, anon uint64
	procs := slices.Clone(v.Processes)
	slices.SortFunc(procs, func(a, b idleProcess) int { return cmp.Compare(b.ProportionalBytes, a.ProportionalBytes) })
	var b strings.Builder
	for _, p := range procs {
		pss += p.ProportionalBytes
		anon += p.AnonymousBytes
		if p.ProportionalBytes >= mib || pct(p.CPUOverMillis) >= 1 || pct(p.ChildrenCPUOverMillis) >= 1 {
			fmt.Fprintf(&b, "  %-24s %7.1f MiB PSS %7.1f MiB anonymous %5.1f %% CPU",
				p.Name, float64(p.ProportionalBytes)/mib, float64(p.AnonymousBytes)/mib, pct(p.CPUOverMillis))
			if p.ChildrenCPUOverMillis > 0 {
				fmt.Fprintf(&b, ", its reaped children %.1f %%", pct(p.ChildrenCPUOverMillis))
			}
			b.WriteString("\n")
		}
	}
	return fmt.Sprintf("  busy %.1f %% of its CPUs; processes together %.1f MiB PSS, %.1f MiB anonymous\n%s",
		pct(v.CPUBusyOverMillis), float64(pss)/mib, float64(anon)/mib, b.String())
}

// TestIdleReport reports a node's busy share, its processes' memory
// together, and the processes that hold memory or used a percent of a
// CPU, themselves or their reaped children, most memory first.
func TestIdleReport(t *testing.T) {
	v := idleView{CPUBusyOverMillis: 2000, CPUAllOverMillis: 10000, Processes: []idleProcess{
		{Name: "kube-proxy", ProportionalBytes: 20 << 20, AnonymousBytes: 10 << 20, CPUOverMillis: 50, ChildrenCPUOverMillis: 300},
		{Name: "kubelet", ProportionalBytes: 50 << 20, AnonymousBytes: 30 << 20, CPUOverMillis: 1200},
		{Name: "tiny", ProportionalBytes: 1 << 10, CPUOverMillis: 20},
	}}
	want := "  busy 20.0 % of its CPUs; processes together 70.0 MiB PSS, 40.0 MiB anonymous\n" +
		"  kubelet                     50.0 MiB PSS    30.0 MiB anonymous  12.0 % CPU\n" +
		"  kube-proxy                  20.0 MiB PSS    10.0 MiB anonymous   0.5 % CPU, its reaped children 3.0 %\n"
	if got := v.report(); got != want {
		t.Errorf("report =\n%s\nwant\n%s", got, want)
	}
}
