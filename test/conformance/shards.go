package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A shard is a part of the conformance suite that one e2e.test process
// runs: the specs its label filter selects.
type shard struct {
	// Name names the shard's directory of results.
	Name string
	// Labels is a Ginkgo label filter (e2e.test --ginkgo.label-filter).
	// Kubernetes labels every spec with its SIG (sig-network), and with
	// Conformance, Serial, Disruptive and Slow where they apply.
	Labels string
	// Focus, if set, is a regular expression that a spec's name must
	// match too (e2e.test --ginkgo.focus).
	Focus string
	// Serial shards run alone, after every other shard, as their specs
	// assume nothing else runs on the cluster.
	Serial bool
}

// focusShard is the shard of the conformance tests whose names match
// focus, for running one test again: serial, so that it may be a serial
// test.
func focusShard(focus string) shard {
	return shard{Name: "focus", Labels: "Conformance", Focus: focus, Serial: true}
}

// narrowed is the shard of s's tests whose names match focus, for
// running some of a shard that is not a conformance one (networkpolicy)
// or parts of one beside each other. Its results have a directory of
// their own, so that the whole shard's stay.
func (s shard) narrowed(focus string) shard {
	s.Name = "focus-" + s.Name
	s.Focus = focus
	return s
}

// sigs are the SIGs that own conformance tests.
var sigs = []string{
	"api-machinery", "apps", "architecture", "auth", "cli",
	"instrumentation", "network", "node", "scheduling", "storage",
}

// defaultShards are the conformance tests, one shard per SIG for those
// that may run beside others; then sig-network's NetworkPolicy tests,
// which are not conformance tests but test what Cairn enforces; then one
// shard of the serial conformance tests.
func defaultShards() []shard {
	var out []shard
	for _, sig := range sigs {
		out = append(out, shard{
			Name:   sig,
			Labels: fmt.Sprintf("Conformance && sig-%s && !Serial && !Disruptive", sig),
		})
	}
	out = append(out, shard{Name: "networkpolicy", Labels: "Feature:NetworkPolicy && !Serial && !Disruptive"})
	return append(out, shard{Name: "serial", Labels: "Conformance && (Serial || Disruptive)", Serial: true})
}

// selectShards returns the shards of all whose names are in names (a
// comma-separated list; empty selects all), in the order of all.
func selectShards(all []shard, names string) ([]shard, error) {
	if names == "" {
		return all, nil
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(names, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []shard
	for _, s := range all {
		if want[s.Name] {
			out = append(out, s)
			delete(want, s.Name)
		}
	}
	if len(want) > 0 {
		unknown := slices.Sorted(maps.Keys(want))
		return nil, fmt.Errorf("no shard named %s (the shards: %s)", strings.Join(unknown, ", "), shardNames(all))
	}
	return out, nil
}

func shardNames(ss []shard) string {
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}
