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
	// Skip, if set, is a regular expression of the specs the shard
	// leaves to another (e2e.test --ginkgo.skip).
	Skip string
	// Serial shards run alone, after every other shard, as their specs
	// assume nothing else runs on the cluster.
	Serial bool
}

// filter says which specs the shard runs: its labels, and its focus and
// skip where it has them.
func (s shard) filter() string {
	f := s.Labels
	if s.Focus != "" {
		f += "; names matching " + s.Focus
	}
	if s.Skip != "" {
		f += "; names not matching " + s.Skip
	}
	return f
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
// their own, so that the whole shard's stay. The focus replaces the
// shard's own; what the shard skips it still skips.
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

// manyPods names the serial conformance tests of up to 100 pods: the
// garbage collector's, which make a ReplicationController as large as
// the workers' pod capacity allows (at most 100 pods). A worker of one
// emulated CPU starts and tears down 50 pods for many minutes after such
// a test has ended, and a test that follows starts on a busy worker and
// times out waiting for its own pods. They run in a shard of their own,
// serial-gc, after the shard serial, which skips them.
const manyPods = `Garbage collector should (orphan pods created by rc if delete options say so|keep the rc around until all its pods are deleted|not delete dependents that have both valid owner and owner)`

// defaultShards are the conformance tests, one shard per SIG for those
// that may run beside others; then sig-network's NetworkPolicy tests,
// which are not conformance tests but test what Cairn enforces; then the
// serial conformance tests, in two shards that run one after the other:
// those of up to 100 pods last.
func defaultShards() []shard {
	var out []shard
	for _, sig := range sigs {
		out = append(out, shard{
			Name:   sig,
			Labels: fmt.Sprintf("Conformance && sig-%s && !Serial && !Disruptive", sig),
		})
	}
	out = append(out, shard{Name: "networkpolicy", Labels: "Feature:NetworkPolicy && !Serial && !Disruptive"})
	const serial = "Conformance && (Serial || Disruptive)"
	return append(out,
		shard{Name: "serial", Labels: serial, Skip: manyPods, Serial: true},
		shard{Name: "serial-gc", Labels: serial, Focus: manyPods, Serial: true})
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
