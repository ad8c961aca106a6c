// Package metrics serves a node's metrics in the Prometheus text format:
// on its own port (ports.Metrics, HTTPS) to scrapers holding a metrics
// certificate of the cluster CA, which nothing else of the cluster
// accepts, and through NodeManagement.GetMetrics to the owner.
//
//	etcd, Go runtime, process ──register──▶ default registry ─┐
//	node/rpc's servers (curator, node management) ─calls─────┤
//	curator (leading, leader changes) ────────────────────────┤
//	procfs (memory, processes) ──at each scrape──▶ node ──────┼─▶ Gatherer
//	supervisor (restarts) ──────────────▶ Restarts ───────────┘     │
//	                                                             ▼
//	scraper ──HTTPS, metrics certificate──▶ :7836/metrics    Text ──▶ GetMetrics
//
// Why a certificate kind of its own: a scraper runs unattended, often far
// from the owner; with the owner certificate a stolen scraper
// configuration would own the cluster, with a metrics certificate it can
// read numbers until the certificate ends.
package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/procstat"
	"cairn.dev/cairn/pkg/supervisor"
)

// Restarts counts the supervisor's restarts of runnables, by the
// runnable's DN (the node's runnables are a fixed set, so the labels are
// bounded).
type Restarts struct {
	vec *prometheus.CounterVec
}

// NewRestarts returns a counter of restarts, for supervisor.WithRestartHook
// and, as a collector, Gatherer.
func NewRestarts() *Restarts {
	return &Restarts{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_supervisor_restarts_total",
		Help: "Restarts of supervised runnables after they failed, by runnable.",
	}, []string{"dn"})}
}

// Describe and Collect make Restarts a prometheus.Collector.
func (r *Restarts) Describe(ch chan<- *prometheus.Desc) { r.vec.Describe(ch) }
func (r *Restarts) Collect(ch chan<- prometheus.Metric) { r.vec.Collect(ch) }

// Inc counts a restart of the runnable dn.
func (r *Restarts) Inc(dn string) {
	r.vec.WithLabelValues(dn).Inc()
}

// Gatherer returns the node's metrics: what the core process's packages
// registered on the default registry (etcd, Go, the process itself), the
// calls of its gRPC servers (cairn_grpc_server_*), the node's memory and
// processes read from proc (/proc on a node) at each scrape, and more:
// the supervisor's Restarts, the curator's metrics.
func Gatherer(proc string, more ...prometheus.Collector) prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(nodeCollector{proc: proc}, rpc.Metrics())
	reg.MustRegister(more...)
	return prometheus.Gatherers{prometheus.DefaultGatherer, reg}
}

// Text renders what g gathers in the text exposition format.
func Text(g prometheus.Gatherer) ([]byte, error) {
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, fmt.Errorf("when gathering metrics: %w", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("when encoding metric %s: %w", mf.GetName(), err)
		}
	}
	return b.Bytes(), nil
}

var (
	memoryTotal = prometheus.NewDesc("cairn_node_memory_total_bytes", "The node's memory.", nil, nil)
	memoryAvail = prometheus.NewDesc("cairn_node_memory_available_bytes", "The node's memory available to new work (MemAvailable).", nil, nil)
	nodeCPU     = prometheus.NewDesc("cairn_node_cpu_seconds_total", "The node's CPU time, its CPUs together, by mode: busy (processes, the kernel's threads, interrupts), idle (waiting for I/O among it), stolen (by a hypervisor).", []string{"mode"}, nil)
	procRSS     = prometheus.NewDesc("cairn_process_resident_bytes", "Resident memory of each process of the node.", []string{"pid", "name"}, nil)
	procCPU     = prometheus.NewDesc("cairn_process_cpu_seconds_total", "User and system CPU time of each process of the node.", []string{"pid", "name"}, nil)
)

// nodeCollector reads the node's memory and processes at each scrape.
type nodeCollector struct {
	proc string
}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memoryTotal, memoryAvail, nodeCPU, procRSS, procCPU} {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	mem, procs, err := procstat.Read(c.proc)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(memoryTotal, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(memoryTotal, prometheus.GaugeValue, float64(mem.TotalBytes))
	ch <- prometheus.MustNewConstMetric(memoryAvail, prometheus.GaugeValue, float64(mem.AvailableBytes))
	if cpu, err := procstat.ReadCPU(c.proc); err != nil {
		ch <- prometheus.NewInvalidMetric(nodeCPU, err)
	} else {
		ch <- prometheus.MustNewConstMetric(nodeCPU, prometheus.CounterValue, cpu.Busy.Seconds(), "busy")
		ch <- prometheus.MustNewConstMetric(nodeCPU, prometheus.CounterValue, cpu.Idle.Seconds(), "idle")
		ch <- prometheus.MustNewConstMetric(nodeCPU, prometheus.CounterValue, cpu.Stolen.Seconds(), "stolen")
	}
	for _, p := range procs {
		pid := strconv.Itoa(p.PID)
		ch <- prometheus.MustNewConstMetric(procRSS, prometheus.GaugeValue, float64(p.ResidentBytes), pid, p.Name)
		ch <- prometheus.MustNewConstMetric(procCPU, prometheus.CounterValue, p.CPUTime.Seconds(), pid, p.Name)
	}
}

// Config is the metrics server's configuration.
type Config struct {
	// Credentials are the node's credentials: the server presents its
	// certificate and judges scrapers by its cluster CA. It serves once
	// they are there.
	Credentials event.Watchable[*identity.Node]
	// Gatherer gathers what is served.
	Gatherer prometheus.Gatherer
	// Port is the port listened on, on every address of the node.
	Port int
}

// Run serves /metrics on cfg.Port until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	node, err := event.Get(ctx, cfg.Credentials, event.NotNil[*identity.Node]())
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		return fmt.Errorf("when listening for metrics: %w", err)
	}
	srv := &http.Server{
		Handler:           Handler(node, cfg.Gatherer),
		TLSConfig:         node.ServerTLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	supervisor.Logger(ctx).Infof("Metrics served on %s to metrics certificates of the cluster CA", lis.Addr())
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	err = srv.ServeTLS(lis, "", "")
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return fmt.Errorf("metrics server stopped: %w", err)
}

// Handler serves g at /metrics to clients node judges to hold a metrics
// certificate, and refuses every other client with 403 and the reason.
func Handler(node *identity.Node, g prometheus.Gatherer) http.Handler {
	metrics := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "metrics are served over TLS only", http.StatusForbidden)
			return
		}
		p, err := node.PeerIdentity(*r.TLS)
		if err != nil || p.Kind != identity.PeerMetrics {
			kind := "no certificate the cluster CA issued"
			if err == nil {
				kind = "a certificate of kind " + p.Kind.String()
			}
			http.Error(w, "metrics require a metrics certificate of the cluster CA (cairnctl metrics credential); the client presented "+kind, http.StatusForbidden)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	return mux
}
