package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeE2E, set in the environment, makes this test binary play e2e.test:
// see playE2E.
const fakeE2E = "CAIRN_CONFORMANCE_FAKE_E2E"

func TestMain(m *testing.M) {
	if os.Getenv(fakeE2E) != "" {
		os.Exit(playE2E(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// playE2E is a stand-in for e2e.test with the flags the runner passes
// (it fails unless its kubectl is the runner's, /payload/kubectl): it
// notes its label filter, focus and skip in the file $fakeE2E names, and
// writes a JUnit report in ginkgo's form, with one spec of its shard that
// passes (or fails, when the filter names sig-failing), a spec of another
// shard that its filter left out, and its suite nodes. With sig-noreport it
// writes no report.
func playE2E(args []string) int {
	fs := flag.NewFlagSet("e2e.test", flag.ContinueOnError)
	reportDir := fs.String("report-dir", "", "")
	labels := fs.String("ginkgo.label-filter", "", "")
	focus := fs.String("ginkgo.focus", "", "")
	skip := fs.String("ginkgo.skip", "", "")
	fs.String("kubeconfig", "", "")
	kubectl := fs.String("kubectl-path", "", "")
	fs.String("provider", "", "")
	fs.String("ginkgo.timeout", "", "")
	fs.Bool("ginkgo.no-color", false, "")
	fs.Bool("ginkgo.v", false, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kubectl != "/payload/kubectl" {
		return 4 // not the kubectl the runner was given
	}
	// Before the call is noted, which tells a test that it may stop it.
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, syscall.SIGINT)
	f, err := os.OpenFile(os.Getenv(fakeE2E), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 3
	}
	fmt.Fprintf(f, "%s\t%s\t%s\n", *labels, *focus, *skip)
	f.Close()
	if strings.Contains(*labels, "sig-noreport") {
		return 1
	}
	if strings.Contains(*labels, "sig-slow") {
		// Interrupted, ginkgo reports the specs that ended and the one
		// it stopped.
		select {
		case <-interrupt:
		case <-time.After(time.Minute):
			return 5
		}
		report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2">
  <testsuite name="Kubernetes e2e suite">
    <testcase name="[It] [sig-slow] First things should work [Conformance]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-slow] Slow things should end [Conformance]" classname="Kubernetes e2e suite" status="interrupted" time="9"><failure type="interrupted">Interrupted by User</failure></testcase>
  </testsuite>
</testsuites>
`
		if err := os.WriteFile(filepath.Join(*reportDir, "junit_01.xml"), []byte(report), 0o644); err != nil {
			return 4
		}
		return 1
	}
	sig := "sig-focus"
	if fields := strings.Fields(*labels); len(fields) > 2 {
		sig = fields[2]
	}
	status, body, code := `status="passed">`, "", 0
	if sig == "sig-failing" {
		status, body, code = `status="failed">`, `<failure type="failed">[FAILED] it broke
at here</failure>`, 1
	}
	report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4">
  <testsuite name="Kubernetes e2e suite">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.5"></testcase>
    <testcase name="[It] [` + sig + `] Things should work [Conformance]" classname="Kubernetes e2e suite" ` + status + body + `</testcase>
    <testcase name="[ReportAfterSuite] [sig-testing] Log Check" classname="Kubernetes e2e suite" status="passed"></testcase>
    <testcase name="[It] [sig-other] Others should work [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>
</testsuites>
`
	if err := os.WriteFile(filepath.Join(*reportDir, "junit_01.xml"), []byte(report), 0o644); err != nil {
		return 4
	}
	return code
}

// TestReadJUnit reads a report of every outcome ginkgo writes: the specs
// of the shard count, with the reason of a failure or a skip; specs its
// filter left out and suite nodes that passed do not; a suite node that
// failed does, as it lost every spec after it.
func TestReadJUnit(t *testing.T) {
	report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="Kubernetes e2e suite">
    <testcase name="[ReportBeforeSuite]" status="passed"></testcase>
    <testcase name="[SynchronizedBeforeSuite]" status="failed"><failure type="failed">[FAILED] nodes not ready
more</failure></testcase>
    <testcase name="[It] [sig-apps] A should pass [Conformance]" status="passed"></testcase>
    <testcase name="[It] [sig-network] B should fail [Conformance]" status="failed"><failure type="failed">
  [FAILED] timed out
  details</failure></testcase>
    <testcase name="[It] [sig-node] C should time out [Conformance]" status="timedout"></testcase>
    <testcase name="[It] [sig-storage] D is skipped [Conformance]" status="skipped"><skipped message="skipped - Only supported for providers [gce]"></skipped></testcase>
    <testcase name="[It] [sig-auth] E is another shard's [Conformance]" status="skipped"><skipped message="skipped"></skipped></testcase>
    <testcase name="[ReportAfterSuite] [sig-testing] Log Check" status="passed"></testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" status="failed"><failure type="failed">could not write</failure></testcase>
  </testsuite>
</testsuites>`
	got, err := readJUnit(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := []spec{
		{Name: "[SynchronizedBeforeSuite]", Outcome: "failed", Reason: "[FAILED] nodes not ready"},
		{Name: "[sig-apps] A should pass [Conformance]", SIG: "sig-apps", Outcome: "passed"},
		{Name: "[sig-network] B should fail [Conformance]", SIG: "sig-network", Outcome: "failed", Reason: "[FAILED] timed out"},
		{Name: "[sig-node] C should time out [Conformance]", SIG: "sig-node", Outcome: "failed", Reason: "timedout"},
		{Name: "[sig-storage] D is skipped [Conformance]", SIG: "sig-storage", Outcome: "skipped", Reason: "Only supported for providers [gce]"},
		{Name: "[ReportAfterSuite] Kubernetes e2e suite report", Outcome: "failed", Reason: "could not write"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readJUnit (-want +got):\n%s", diff)
	}
	if _, err := readJUnit(strings.NewReader("<testsuites><testsuite>")); err == nil {
		t.Errorf("readJUnit of a truncated report = nil error, want one")
	}
}

func TestSelectShards(t *testing.T) {
	all := defaultShards()
	got, err := selectShards(all, "serial, network")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("network, serial", shardNames(got)); diff != "" {
		t.Errorf("selectShards(serial, network) (-want +got):\n%s", diff)
	}
	if got, _ := selectShards(all, ""); len(got) != len(all) {
		t.Errorf("selectShards(\"\") = %d shards, want all %d", len(got), len(all))
	}
	if _, err := selectShards(all, "network,nosuch,zzz"); err == nil || !strings.Contains(err.Error(), "no shard named nosuch, zzz") {
		t.Errorf("selectShards with unknown names = %v, want an error naming them", err)
	}
}

// TestCheckArgs checks what -shards and -focus select: a focus alone is
// the conformance tests it matches; with shards, each of them narrowed to
// it, in a directory of its own and serial only if the shard is.
func TestCheckArgs(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	all := defaultShards()
	for _, tc := range []struct {
		shards, focus string
		want          []shard
	}{
		{"", "SCTP", []shard{{Name: "focus", Labels: "Conformance", Focus: "SCTP", Serial: true}}},
		{"networkpolicy,serial", "SCTP|Daemon", []shard{
			{Name: "focus-networkpolicy", Labels: "Feature:NetworkPolicy && !Serial && !Disruptive", Focus: "SCTP|Daemon"},
			{Name: "focus-serial", Labels: "Conformance && (Serial || Disruptive)", Focus: "SCTP|Daemon", Skip: manyPods, Serial: true},
		}},
		{"networkpolicy", "", []shard{{Name: "networkpolicy", Labels: "Feature:NetworkPolicy && !Serial && !Disruptive"}}},
	} {
		got, err := checkArgs(all, tc.shards, tc.focus, kubeconfig)
		if err != nil {
			t.Errorf("checkArgs(%q, %q): %v", tc.shards, tc.focus, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("checkArgs(%q, %q) (-want +got):\n%s", tc.shards, tc.focus, diff)
		}
	}
	if _, err := checkArgs(all, "nosuch", "x", kubeconfig); err == nil {
		t.Error("checkArgs of an unknown shard with a focus: no error")
	}
	if _, err := checkArgs(all, "", "x", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("checkArgs without a kubeconfig = %v, want an error saying so", err)
	}
	if got := defaultShards(); !cmp.Equal(got, all) {
		t.Error("checkArgs changed the default shards")
	}
}

// TestRunnerResumes runs shards through a stand-in e2e.test: each shard
// ends with a result; a second run at the same commit runs only the shard
// whose result is missing (as after an interrupted run); another commit,
// or -again, runs them all; a focus shard passes its focus, and another
// focus is another shard; a shard whose e2e.test leaves no report is an
// error, not a result; an interrupted shard keeps what its report named,
// unfinished, and runs again. The summary counts the outcomes by SIG and
// names the shards unfinished or not run.
func TestRunnerResumes(t *testing.T) {
	self, calls := playingE2E(t)
	dir := t.TempDir()
	shards := []shard{
		{Name: "a", Labels: "Conformance && sig-apps && !Serial"},
		{Name: "f", Labels: "Conformance && sig-failing && !Serial"},
		{Name: "s", Labels: "Conformance && sig-serial && Serial", Serial: true},
	}
	var log bytes.Buffer
	newRunner := func(commit string, again bool) *runner {
		return &runner{
			e2e: self, kubeconfig: "kubeconfig", kubectl: "/payload/kubectl", dir: dir, commit: commit,
			parallel: 2, timeout: time.Minute, again: again, progress: time.Hour,
			logf: func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) },
		}
	}
	ran := func() []string {
		b, _ := os.ReadFile(calls)
		os.Remove(calls)
		var out []string
		for l := range strings.Lines(string(b)) {
			labels, rest, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "\t")
			focus, skip, _ := strings.Cut(rest, "\t")
			switch {
			case focus != "":
				out = append(out, "focus "+focus)
			case skip != "":
				out = append(out, "skip "+skip)
			default:
				out = append(out, strings.Fields(labels)[2])
			}
		}
		return out
	}
	ctx := t.Context()

	results, err := newRunner("c1", false).run(ctx, shards)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, log.String())
	}
	if got := ran(); len(got) != 3 || got[2] != "sig-serial" {
		t.Errorf("first run ran %v, want the three shards, the serial one last", got)
	}
	var sum bytes.Buffer
	summary(&sum, results, nil)
	for _, want := range []string{
		"| sig-apps | 1 | 0 | 0 |",
		"| sig-failing | 0 | 1 | 0 |",
		"| all | 2 | 1 | 0 |",
		"- [sig-failing] Things should work [Conformance]: [FAILED] it broke",
	} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}

	if err := os.Remove(filepath.Join(dir, "f", "result.json")); err != nil {
		t.Fatal(err)
	}
	results, err = newRunner("c1", false).run(ctx, shards)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if diff := cmp.Diff([]string{"sig-failing"}, ran()); diff != "" {
		t.Errorf("second run at the same commit ran (-want +got):\n%s", diff)
	}
	if n := len(results[0].Specs) + len(results[1].Specs) + len(results[2].Specs); n != 3 {
		t.Errorf("second run's results hold %d specs, want the 3 of all shards, kept ones too", n)
	}

	if _, err := newRunner("c2", false).run(ctx, shards); err != nil {
		t.Fatal(err)
	}
	if got := ran(); len(got) != 3 {
		t.Errorf("run at another commit ran %v, want all three shards", got)
	}
	if _, err := newRunner("c2", true).run(ctx, shards[:1]); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"sig-apps"}, ran()); diff != "" {
		t.Errorf("run with again ran (-want +got):\n%s", diff)
	}

	if _, err := newRunner("c2", false).run(ctx, []shard{focusShard("Things should")}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"focus Things should"}, ran()); diff != "" {
		t.Errorf("run of a focus shard ran (-want +got):\n%s", diff)
	}
	if _, err := newRunner("c2", false).run(ctx, []shard{focusShard("Other things")}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"focus Other things"}, ran()); diff != "" {
		t.Errorf("a focus shard with another focus at the same commit ran (-want +got):\n%s", diff)
	}

	// The serial shards run one after the other, in their order: the
	// tests of many pods last. A shard that skips other specs is
	// another shard.
	all := defaultShards()
	serial := all[len(all)-2:]
	if _, err := newRunner("c2", false).run(ctx, serial); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"skip " + manyPods, "focus " + manyPods}, ran()); diff != "" {
		t.Errorf("run of the serial shards ran (-want +got):\n%s", diff)
	}
	serial[0].Skip = "Other things"
	if _, err := newRunner("c2", false).run(ctx, serial); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"skip Other things"}, ran()); diff != "" {
		t.Errorf("a shard with another skip at the same commit ran (-want +got):\n%s", diff)
	}

	_, err = newRunner("c2", false).run(ctx, []shard{{Name: "n", Labels: "Conformance && sig-noreport"}})
	if err == nil || !strings.Contains(err.Error(), "left no readable report") {
		t.Errorf("run of a shard without a report = %v, want an error saying so", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "n", "result.json")); statErr == nil {
		t.Errorf("a shard without a report has a result.json, so it would never run again")
	}

	// Interrupted while a shard runs, a run keeps what the shard's
	// report named, marked unfinished, and leaves the shard to run
	// again; the summary says so, and names a shard that did not run.
	ictx, interrupt := context.WithCancel(ctx)
	go func() {
		for ictx.Err() == nil {
			if b, _ := os.ReadFile(calls); strings.Contains(string(b), "sig-slow") {
				interrupt()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	results, err = newRunner("c3", false).run(ictx, []shard{{Name: "w", Labels: "Conformance && sig-slow && !Serial"}})
	interrupt()
	if err == nil || !strings.Contains(err.Error(), "run again to resume") {
		t.Errorf("interrupted run = %v, want an error saying how to resume", err)
	}
	if len(results) != 1 || !results[0].Interrupted || results[0].tally() != (tally{Passed: 1, Failed: 1}) {
		t.Errorf("interrupted shard's result = %+v, want interrupted with 1 passed and 1 failed (the spec it stopped)", results)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "w", "result.json")); statErr == nil {
		t.Errorf("an interrupted shard has a result.json, so it would not run again")
	}
	sum.Reset()
	summary(&sum, results, []string{"x"})
	for _, want := range []string{
		"| sig-slow | 1 | 1 | 0 |",
		"Not finished, counted as far as they got: w (1 passed, 1 failed, 0 skipped).",
		"Not run: x.",
	} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary of an interrupted run lacks %q:\n%s", want, sum.String())
		}
	}

	// Interrupted before it starts, a run says how to resume.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := newRunner("c3", false).run(cctx, shards); err == nil || !strings.Contains(err.Error(), "run again to resume") {
		t.Errorf("cancelled run = %v, want an error saying how to resume", err)
	}
}

// playingE2E makes this test binary, whose path it returns, play
// e2e.test for the rest of t, noting each run in the file calls.
func playingE2E(t *testing.T) (self, calls string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	calls = filepath.Join(t.TempDir(), "calls")
	t.Setenv(fakeE2E, calls)
	return self, calls
}

// TestRunnerSettles runs serial shards with a cluster whose namespaces
// are being deleted: each serial shard starts once none is, or once it
// has waited settleFor, or at once when they cannot be listed; shards
// that run beside others do not wait.
func TestRunnerSettles(t *testing.T) {
	self, calls := playingE2E(t)
	shards := []shard{
		{Name: "p", Labels: "Conformance && sig-apps && !Serial"},
		{Name: "s1", Labels: "Conformance && sig-one && Serial", Serial: true},
		{Name: "s2", Labels: "Conformance && sig-two && Serial", Serial: true},
	}
	for _, tc := range []struct {
		name string
		// answers are the namespaces being deleted at each listing
		// (the last repeats); an empty slice is none, nil an error.
		answers [][]string
		// settleFor is how long a serial shard waits at most.
		settleFor time.Duration
		// want is the order of listings ("list") and shards' starts.
		want []string
		// wantLog are parts of the log, the times left out.
		wantLog []string
	}{
		{
			name:      "gone",
			answers:   [][]string{{"gc-1", "gc-2"}, {"gc-2"}, {}},
			settleFor: time.Hour,
			want:      []string{"sig-apps", "list", "list", "list", "sig-one", "list", "sig-two"},
			wantLog:   []string{"waiting for the namespaces of earlier tests to be deleted (", "s so far): gc-1, gc-2\n", "the namespaces of earlier tests are gone after "},
		},
		{
			name:      "still going",
			answers:   [][]string{{"stuck"}},
			settleFor: 0,
			want:      []string{"sig-apps", "list", "sig-one", "list", "sig-two"},
			wantLog:   []string{"namespaces still being deleted after ", "s, the next shard starts beside them: stuck\n"},
		},
		{
			name:      "unlisted",
			answers:   [][]string{nil},
			settleFor: time.Hour,
			want:      []string{"sig-apps", "list", "sig-one", "list", "sig-two"},
			wantLog:   []string{"not waiting for the namespaces being deleted: no cluster\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(calls)
			var (
				log   bytes.Buffer
				order []string
				n     int
			)
			shardsRan := 0
			// What e2e.test ran so far, appended to order at each listing
			// and at the end.
			catchUp := func() {
				b, _ := os.ReadFile(calls)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				for _, l := range lines[shardsRan:] {
					if l != "" {
						order = append(order, strings.Fields(l)[2])
						shardsRan++
					}
				}
			}
			r := &runner{
				e2e: self, kubeconfig: "kubeconfig", kubectl: "/payload/kubectl", dir: t.TempDir(), commit: "c1",
				parallel: 2, timeout: time.Minute, progress: time.Hour,
				logf: func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) },
				terminating: func(context.Context) ([]string, error) {
					catchUp()
					order = append(order, "list")
					a := tc.answers[min(n, len(tc.answers)-1)]
					n++
					if a == nil {
						return nil, fmt.Errorf("no cluster")
					}
					return a, nil
				},
				settleFor: tc.settleFor, settlePoll: time.Millisecond,
			}
			if _, err := r.run(t.Context(), shards); err != nil {
				t.Fatalf("run: %v\n%s", err, log.String())
			}
			catchUp()
			if diff := cmp.Diff(tc.want, order); diff != "" {
				t.Errorf("listings and shards (-want +got):\n%s", diff)
			}
			for _, want := range tc.wantLog {
				if !strings.Contains(log.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, log.String())
				}
			}
		})
	}
}

func TestVersionOfNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes, want, err string
	}{
		{nodes: "a=Cairn 1.2.3\nb=Cairn 1.2.3\n", want: "1.2.3"},
		{nodes: "a=Cairn 1.2.3\nb=Cairn 1.2.4\n", err: "different versions of Cairn (a: 1.2.3; b: 1.2.4)"},
		{nodes: "a=Debian GNU/Linux 12 (bookworm)\n", err: `node a runs "Debian GNU/Linux 12 (bookworm)", not Cairn`},
		{nodes: "a=Unknown\n", err: "not Cairn"},
		{nodes: "", err: "no nodes"},
	} {
		got, err := versionOfNodes(tc.nodes)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("versionOfNodes(%q) = %q, %v, want an error with %q", tc.nodes, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("versionOfNodes(%q) = %q, %v, want %q", tc.nodes, got, err, tc.want)
		}
	}
}
