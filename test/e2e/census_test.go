//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// A call census: which calls a server answered in a window, from two
// readings of its Prometheus counters, so that a footprint names what
// polls rather than only what it costs.

// counterSample is one series of a counter: its labels and its value.
type counterSample struct {
	labels map[string]string
	value  float64
}

// counters are the series of the metrics names in a Prometheus text
// exposition, by their name and labels.
func counters(text []byte, names ...string) (map[string]counterSample, error) {
	families, err := parseMetrics(text)
	if err != nil {
		return nil, err
	}
	return series(families, names...), nil
}

// parseMetrics reads a Prometheus text exposition, once, for series to
// pick from.
func parseMetrics(text []byte) (map[string]*dto.MetricFamily, error) {
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("when reading metrics: %w", err)
	}
	return families, nil
}

// series are the series of the metrics names among families, by their
// name and labels.
func series(families map[string]*dto.MetricFamily, names ...string) map[string]counterSample {
	out := make(map[string]counterSample)
	for _, name := range names {
		for _, m := range families[name].GetMetric() {
			l := labels(m)
			// fmt prints a map's keys sorted: one key per series.
			out[name+fmt.Sprint(l)] = counterSample{l, m.GetCounter().GetValue() + m.GetUntyped().GetValue()}
		}
	}
	return out
}

// labels are the labels of m by name.
func labels(m *dto.Metric) map[string]string {
	l := make(map[string]string)
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// census is the rate per minute of each kind of call between two readings
// over, a kind named by the values of keys in its series (the labels
// missing from a series are left out), most frequent first; kinds of the
// same name (differing in labels not among keys) are added up. It lists
// the first top kinds and the calls in all.
func census(before, after map[string]counterSample, over time.Duration, top int, keys ...string) string {
	perKind := make(map[string]float64)
	var all float64
	for series, v := range after {
		d := v.value - before[series].value
		if d <= 0 {
			continue
		}
		l := v.labels
		var name []string
		for _, k := range keys {
			if l[k] != "" {
				name = append(name, l[k])
			}
		}
		perKind[strings.Join(name, " ")] += d
		all += d
	}
	type kind struct {
		name string
		n    float64
	}
	var kinds []kind
	for n, v := range perKind {
		kinds = append(kinds, kind{n, v})
	}
	slices.SortFunc(kinds, func(a, b kind) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.name, b.name))
	})
	minute := over.Minutes()
	var b strings.Builder
	fmt.Fprintf(&b, "    %.1f per minute in all", all/minute)
	for i, k := range kinds {
		if i == top {
			fmt.Fprintf(&b, "; %d more kinds", len(kinds)-top)
			break
		}
		fmt.Fprintf(&b, "\n    %6.1f  %s", k.n/minute, k.name)
	}
	return b.String()
}

// TestCensus reads two expositions a minute apart into the rates of the
// calls between them: series of one kind added up, a series new in the
// second reading counted whole, other metrics and unchanged series left
// out.
func TestCensus(t *testing.T) {
	first := []byte(`# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",resource="leases",verb="PUT",version="v1"} 100
apiserver_request_total{code="409",component="apiserver",resource="leases",verb="PUT",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",resource="nodes",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_duration_seconds_count{resource="leases",verb="PUT"} 104
`)
	second := []byte(`apiserver_request_total{code="200",component="apiserver",resource="leases",verb="PUT",version="v1"} 128
apiserver_request_total{code="409",component="apiserver",resource="leases",verb="PUT",version="v1"} 6
apiserver_request_total{code="200",component="apiserver",resource="nodes",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",group="",resource="",verb="GET",version=""} 3
apiserver_request_duration_seconds_count{resource="leases",verb="PUT"} 200
`)
	a, err := counters(first, "apiserver_request_total")
	if err != nil {
		t.Fatal(err)
	}
	b, err := counters(second, "apiserver_request_total")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 3 || len(b) != 4 {
		t.Fatalf("read %d and %d series, want 3 and 4: %v %v", len(a), len(b), a, b)
	}
	got := census(a, b, 2*time.Minute, 5, "verb", "resource", "subresource")
	want := "    16.5 per minute in all\n      15.0  PUT leases\n       1.5  GET"
	if got != want {
		t.Errorf("census:\n%s\nwant:\n%s", got, want)
	}
	if got := census(a, b, time.Minute, 1, "verb", "resource"); !strings.HasSuffix(got, "; 1 more kinds") {
		t.Errorf("census of the first kind only: %q does not count the one left out", got)
	}
	if _, err := counters([]byte("apiserver_request_total{verb=\"GET\"} many\n"), "apiserver_request_total"); err == nil {
		t.Error("a sample whose value is no number was read")
	}
}
