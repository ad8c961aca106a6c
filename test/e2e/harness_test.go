//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"cairn.dev/cairn/test/launch"
)

var (
	imageDirFlag = flag.String("image-dir", "", "directory with cairn.img, vmlinuz, initramfs.img, initramfs-test.img and cmdline (default $CAIRN_IMAGE_DIR or out/ at the repository root)")
	memoryFlag   = flag.Int("memory", 2048, "memory of each node in MiB")
	cairnctlFlag = flag.String("cairnctl", "", "the cairnctl binary the suites run as the operator (default <image dir>/cairnctl)")
	longFlag     = flag.Bool("long", false, "run the full matrix of the suites that have one (make test-long), not only their representative cases")
)

// repoRoot returns the directory above the working directory (the test's
// package directory) that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory: cannot find the repository root")
		}
		dir = parent
	}
}

// imageDir returns the directory that holds the build's output.
func imageDir(t *testing.T) string {
	t.Helper()
	if *imageDirFlag != "" {
		return *imageDirFlag
	}
	if d := os.Getenv("CAIRN_IMAGE_DIR"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(t), "out")
}

// cairnctlPath returns the cairnctl binary that suites run as a subprocess,
// failing the test (with the command that builds it) when it is missing.
func cairnctlPath(t *testing.T) string {
	t.Helper()
	if *cairnctlFlag != "" {
		if _, err := os.Stat(*cairnctlFlag); err != nil {
			t.Fatalf("cairnctl missing: %v (run make cairnctl, or pass -cairnctl)", err)
		}
		return *cairnctlFlag
	}
	return artifact(t, "cairnctl")
}

// artifact returns the path of a build output, failing the test (with the
// command that makes it) when it is missing.
func artifact(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(imageDir(t), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("build output missing: %v (run make image, or pass -image-dir)", err)
	}
	return p
}

// copyImage returns a sparse copy of the built disk image in a temporary
// directory, for a node that writes to its disk or a test that damages it.
func copyImage(t *testing.T) string {
	t.Helper()
	disk := filepath.Join(t.TempDir(), "disk.img")
	if out, err := exec.Command("cp", "--sparse=always", artifact(t, "cairn.img"), disk).CombinedOutput(); err != nil {
		t.Fatalf("copying the image: %v: %s", err, out)
	}
	return disk
}

// suite is one end-to-end suite: a deadline, the nodes it launched and the
// steps it timed.
type suite struct {
	t     *testing.T
	ctx   context.Context
	start time.Time
	steps []launch.Phase

	mu sync.Mutex
	// consoles are the digests of the nodes' consoles, kept when the
	// suite failed; failures are the messages of its failed waits.
	consoles, failures []string
}

// fatalf fails t at once, as t.Fatalf does, and keeps the message for the
// suite's digest: the test's own output holds it among the lines of every
// suite that ran beside it.
func (s *suite) fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, t.Name()+": "+msg)
	s.mu.Unlock()
	t.Fatal(msg)
}

// newSuite starts a parallel suite that runs up to nodes nodes at once
// and must finish within deadline, counted from when the node budget lets
// it start. When it ends it logs its duration, its wait and
// its timings.
func newSuite(t *testing.T, nodes int, deadline time.Duration) *suite {
	t.Parallel()
	asked := time.Now()
	t.Cleanup(budget.take(nodes)) // runs last: after the nodes are closed
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	s := &suite{t: t, ctx: ctx, start: time.Now()}
	if waited := s.start.Sub(asked); waited > budgetGathers+time.Second {
		t.Logf("waited %.0f s for %d nodes' room in the node budget", waited.Seconds(), nodes)
	}
	t.Cleanup(func() {
		cancel()
		s.report()
	})
	return s
}

// launch boots a node whose console goes to out/e2e/<suite>.console.log;
// it is closed when the suite ends, and its console's tail is logged if
// the suite failed.
func (s *suite) launch(cfg launch.Config, opts ...launch.Option) *launch.Node {
	s.t.Helper()
	logDir := filepath.Join(repoRoot(s.t), "out", "e2e")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	logFile := filepath.Join(logDir, strings.ReplaceAll(s.t.Name(), "/", "_")+".console.log")
	opts = append(opts, launch.WithConsoleFile(logFile))
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = *memoryFlag
	}
	n, err := launch.Launch(s.ctx, cfg, opts...)
	if err != nil {
		s.t.Fatalf("launching %s: %v", cfg.Name, err)
	}
	s.closeAtEnd(n, logFile)
	return n
}

// closeAtEnd closes n when the suite ends, logging the tail of its console
// (all of it is in logFile) if the suite failed.
func (s *suite) closeAtEnd(n *launch.Node, logFile string) {
	s.t.Cleanup(func() {
		if s.t.Failed() {
			s.consoleOnFailure(n.Name(), n)
		}
		if err := n.Close(); err != nil {
			s.t.Errorf("closing %s: %v", n.Name(), err)
		}
	})
}

// milestone matches the console lines that tell where a node got to: the
// markers, the lines of /init, errors, panics, and the firmware and kernel
// starting or restarting the machine.
var milestone = regexp.MustCompile(`@cairn-mark|\] cairn: |^E\d{4} |panic|reboot: |BdsDxe: starting|Linux version`)

// consoleOnFailure logs the tail of the console of node name (vm) for a
// suite that failed, and keeps a digest of it, the node's last milestones,
// for the suite's report.
func (s *suite) consoleOnFailure(name string, vm *launch.Node) {
	s.t.Logf("last console lines of %s (all in %s):\n%s", name, vm.ConsolePath(), vm.Console().Tail(40))
	lines := vm.Console().Lines()
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < 30; i-- {
		if milestone.MatchString(lines[i].Text) {
			keep = append(keep, lines[i].Time.Format("15:04:05.0")+" "+clip(lines[i].Text, 200))
		}
	}
	slices.Reverse(keep)
	var b strings.Builder
	fmt.Fprintf(&b, "== %s: %s, %d console lines (all in %s); its last milestones:\n", s.t.Name(), name, len(lines), vm.ConsolePath())
	for _, l := range keep {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if n := len(lines); n > 0 {
		fmt.Fprintf(&b, "  last line: %s %s\n", lines[n-1].Time.Format("15:04:05.0"), clip(lines[n-1].Text, 200))
	}
	s.mu.Lock()
	s.consoles = append(s.consoles, b.String())
	s.mu.Unlock()
}

// digest appends text to out/e2e/<suite>.failed.txt. make e2e prints these
// files after every suite has ended, so that why a suite failed is at the
// end of the output and not lost among the lines of the suites that ran
// beside it.
func (s *suite) digest(text string) {
	path := filepath.Join(repoRoot(s.t), "out", "e2e", strings.ReplaceAll(s.t.Name(), "/", "_")+".failed.txt")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.t.Logf("keeping the digest of the failure: %v", err)
	}
}

// clip cuts s to at most n bytes, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// waitFor waits for a console line of n, failing the suite at its deadline
// or when qemu exits first.
func (s *suite) waitFor(n *launch.Node, m launch.Matcher) launch.Line {
	s.t.Helper()
	return s.waitFrom(n, 0, m)
}

func (s *suite) waitFrom(n *launch.Node, from int, m launch.Matcher) launch.Line {
	s.t.Helper()
	l, err := n.WaitFrom(s.ctx, from, m)
	if err != nil {
		s.fatalf(s.t, "%v", err)
	}
	return l
}

// ctxWithin returns the suite's context, cut to end within d.
func (s *suite) ctxWithin(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(s.ctx, d)
	s.t.Cleanup(cancel)
	return ctx
}

// step records a timing for the report.
func (s *suite) step(name string, d time.Duration) {
	s.steps = append(s.steps, launch.Phase{Name: name, Duration: d})
}

// bootTimings records the phases of n's boot from its console.
func (s *suite) bootTimings(n *launch.Node, marks launch.BootMarks) {
	s.t.Helper()
	tm, err := launch.BootTimings(n.Started(), n.Console().Lines(), 0, marks)
	if err != nil {
		s.t.Errorf("boot timings of %s: %v", n.Name(), err)
		return
	}
	for _, p := range tm.Phases() {
		s.step(p.Name, p.Duration)
	}
}

// report logs the suite's duration and its timings as a table.
func (s *suite) report() {
	var b strings.Builder
	fmt.Fprintf(&b, "%s took %v\n", s.t.Name(), time.Since(s.start).Round(time.Millisecond))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  phase\tseconds\n")
	for _, p := range s.steps {
		fmt.Fprintf(w, "  %s\t%7.3f\n", p.Name, p.Duration.Seconds())
	}
	w.Flush()
	s.t.Log("\n" + b.String())
	if !s.t.Failed() {
		return
	}
	// What explains the failure best comes last, where a reader of the
	// output's tail looks first: the timings, the nodes' milestones, then
	// the failed waits' messages.
	s.mu.Lock()
	defer s.mu.Unlock()
	b.WriteString(strings.Join(s.consoles, ""))
	if len(s.failures) > 0 {
		fmt.Fprintf(&b, "== %s failed:\n", s.t.Name())
		for _, f := range s.failures {
			fmt.Fprintf(&b, "  %s\n", clip(f, 600))
		}
	}
	s.digest("== " + b.String())
}
