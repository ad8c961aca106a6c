package metricsapi

import (
	"fmt"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The kubelet's resource metrics (/metrics/resource): cumulative CPU time
// and the memory working set of the node and of each container, each
// stamped with when the kubelet read it.
const (
	nodeCPU         = "node_cpu_usage_seconds_total"
	nodeMemory      = "node_memory_working_set_bytes"
	containerCPU    = "container_cpu_usage_seconds_total"
	containerMemory = "container_memory_working_set_bytes"
)

// A reading is one cumulative CPU time and one working set, each with the
// time the kubelet read it.
type reading struct {
	cpu      float64 // core-seconds since the start
	cpuAt    time.Time
	memory   uint64 // bytes
	memoryAt time.Time
}

// complete tells whether the reading has both of its values.
func (r reading) complete() bool {
	return !r.cpuAt.IsZero() && !r.memoryAt.IsZero()
}

// A containerKey names a container of a pod.
type containerKey struct {
	namespace, pod, container string
}

// A scrape is what one kubelet reported at once: the node's reading and
// its containers'.
type scrape struct {
	node       reading
	containers map[containerKey]reading
}

// parseScrape reads a kubelet's /metrics/resource answer. Samples without
// a timestamp, or containers without a name, are left out: no usage can
// be computed from them.
func parseScrape(r io.Reader) (scrape, error) {
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return scrape{}, fmt.Errorf("when parsing the kubelet's resource metrics: %w", err)
	}
	s := scrape{containers: map[containerKey]reading{}}
	for _, m := range families[nodeCPU].GetMetric() {
		if v, at, ok := sampleOf(m); ok {
			s.node.cpu, s.node.cpuAt = v, at
		}
	}
	for _, m := range families[nodeMemory].GetMetric() {
		if v, at, ok := sampleOf(m); ok && v >= 0 {
			s.node.memory, s.node.memoryAt = uint64(v), at
		}
	}
	for _, m := range families[containerCPU].GetMetric() {
		k, kok := containerOf(m)
		v, at, ok := sampleOf(m)
		if kok && ok {
			c := s.containers[k]
			c.cpu, c.cpuAt = v, at
			s.containers[k] = c
		}
	}
	for _, m := range families[containerMemory].GetMetric() {
		k, kok := containerOf(m)
		v, at, ok := sampleOf(m)
		if kok && ok && v >= 0 {
			c := s.containers[k]
			c.memory, c.memoryAt = uint64(v), at
			s.containers[k] = c
		}
	}
	return s, nil
}

// sampleOf returns the value of a counter or gauge sample and its
// timestamp.
func sampleOf(m *dto.Metric) (float64, time.Time, bool) {
	if m.TimestampMs == nil {
		return 0, time.Time{}, false
	}
	at := time.UnixMilli(m.GetTimestampMs())
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), at, true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), at, true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), at, true
	}
	return 0, time.Time{}, false
}

// containerOf returns the container a sample is of.
func containerOf(m *dto.Metric) (containerKey, bool) {
	var k containerKey
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "namespace":
			k.namespace = l.GetValue()
		case "pod":
			k.pod = l.GetValue()
		case "container":
			k.container = l.GetValue()
		}
	}
	return k, k.namespace != "" && k.pod != "" && k.container != ""
}
