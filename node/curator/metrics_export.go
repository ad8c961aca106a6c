package curator

import "github.com/prometheus/client_golang/prometheus"

// The curator's metrics, for the node's (node/metrics). A node runs one
// curator at a time, so they are the process's.
var (
	leadingGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cairn_curator_leading",
		Help: "1 while this node's curator leads the cluster's curators, else 0.",
	})
	leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cairn_curator_leader_changes_total",
		Help: "Times this node's curator saw another curator, or itself, take the lead.",
	})
)

// Metrics are the collectors of the curator's metrics.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{leadingGauge, leaderChanges}
}

// countLeader records that the leader is now l, after old.
func countLeader(old, l leader) {
	if l.Local {
		leadingGauge.Set(1)
	} else {
		leadingGauge.Set(0)
	}
	if l.NodeID != "" && l.NodeID != old.NodeID {
		leaderChanges.Inc()
	}
}
