package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"cairn.dev/cairn/test/launch"
)

// stat is one phase over several boots.
type stat struct {
	name             string
	min, median, max time.Duration
}

// summarize reduces boots (each a list of phases in the same order) to one
// stat per phase, in that order.
func summarize(boots [][]launch.Phase) []stat {
	if len(boots) == 0 {
		return nil
	}
	var stats []stat
	for i, p := range boots[0] {
		var d []time.Duration
		for _, b := range boots {
			d = append(d, b[i].Duration)
		}
		slices.Sort(d)
		stats = append(stats, stat{name: p.Name, min: d[0], median: median(d), max: d[len(d)-1]})
	}
	return stats
}

// median of sorted durations; the mean of the middle two for an even count.
func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// summaryTable prints the stats of one image, in seconds.
func summaryTable(title string, stats []stat) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", title)
	fmt.Fprintf(&b, "  %-26s %8s %9s %8s\n", "phase", "min s", "median s", "max s")
	for _, s := range stats {
		fmt.Fprintf(&b, "  %-26s %8.3f %9.3f %8.3f\n", s.name, s.min.Seconds(), s.median.Seconds(), s.max.Seconds())
	}
	return b.String()
}

// costTable, titled title, sets the medians of a against those of the
// floor b, phase by phase: the ratio and the seconds a adds. The columns
// are named after aName and bName. A floor of zero has no ratio.
func costTable(title, aName, bName string, a, b []stat) string {
	floor := map[string]time.Duration{}
	for _, s := range b {
		floor[s.name] = s.median
	}
	var w strings.Builder
	fmt.Fprintf(&w, "%s\n", title)
	fmt.Fprintf(&w, "  %-26s %8s %8s %7s %8s\n", "phase", aName+" s", bName+" s", "ratio", "added s")
	for _, s := range a {
		f, ok := floor[s.name]
		if !ok {
			continue
		}
		ratio := "-"
		if f > 0 {
			ratio = fmt.Sprintf("%.2fx", s.median.Seconds()/f.Seconds())
		}
		fmt.Fprintf(&w, "  %-26s %8.3f %8.3f %7s %+8.3f\n", s.name, s.median.Seconds(), f.Seconds(), ratio, (s.median - f).Seconds())
	}
	return w.String()
}
