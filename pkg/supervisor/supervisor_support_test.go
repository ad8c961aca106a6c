package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/mountinfo"
)

// commandTree runs cmd through RunCommand in the runnable root.cmd and
// reports what RunCommand returned on the first run. The runnable finishes
// (Done) when the command exits cleanly.
func commandTree(t *testing.T, cmd func() *exec.Cmd, opts ...Option) (*Supervisor, context.CancelFunc, <-chan error) {
	t.Helper()
	return commandTreeWith(t, cmd, nil, opts...)
}

// commandTreeWith is commandTree with options for RunCommand.
func commandTreeWith(t *testing.T, cmd func() *exec.Cmd, cmdOpts []CommandOption, opts ...Option) (*Supervisor, context.CancelFunc, <-chan error) {
	t.Helper()
	result := make(chan error, 1)
	run := func(ctx context.Context) error {
		err := RunCommand(ctx, cmd(), cmdOpts...)
		select {
		case result <- err:
		default:
		}
		if err != nil {
			return err
		}
		Signal(ctx, SignalDone)
		return nil
	}
	s, cancel := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "cmd", run); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		return nil
	}, opts...)
	return s, cancel, result
}

// TestRunCommandOutput checks that both output streams land in the raw log
// line by line, and that a command that exits cleanly has let the runnable
// become healthy (Done would otherwise kill it).
func TestRunCommandOutput(t *testing.T) {
	s, _, result := commandTree(t, func() *exec.Cmd {
		return exec.Command("sh", "-c", "echo out one; echo err one >&2; printf 'out two\\npartial'")
	})
	raw := rawLines(t, s, result)
	want := []string{"out one", "err one", "out two", "partial"}
	if strings.Join(raw, "|") != strings.Join(want, "|") {
		t.Errorf("raw log = %q, want %q", raw, want)
	}
}

// rawLines waits for a commandTree to finish with its command exiting
// cleanly, and returns the raw lines of the command's log.
func rawLines(t *testing.T, s *Supervisor, result <-chan error) []string {
	t.Helper()
	if err := waitFor(t, s); err != nil {
		t.Fatalf("Wait() = %v, want nil: the tree finishes", err)
	}
	if err := <-result; err != nil {
		t.Fatalf("RunCommand = %v, want nil", err)
	}
	r, err := s.LogTree().Read("root.cmd", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var raw []string
	for _, e := range r.Backlog {
		if e.Raw {
			raw = append(raw, e.Message)
		}
	}
	return raw
}

// TestRunCommandKlog checks that with ParseKlog a command's klog lines
// become leveled entries with their own severities, and other lines stay
// raw.
func TestRunCommandKlog(t *testing.T) {
	s, _, result := commandTreeWith(t, func() *exec.Cmd {
		return exec.Command("sh", "-c", "echo 'W1124 01:02:03.456789 42 kubelet.go:7] no swap'; echo plain >&2")
	}, []CommandOption{ParseKlog()})
	if err := waitFor(t, s); err != nil {
		t.Fatalf("Wait() = %v, want nil: the tree finishes", err)
	}
	if err := <-result; err != nil {
		t.Fatalf("RunCommand = %v, want nil", err)
	}
	r, err := s.LogTree().Read("root.cmd", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for _, e := range r.Backlog {
		if e.File == "supervisor_processor.go" {
			// The supervisor's own notes.
			continue
		}
		got = append(got, fmt.Sprintf("%s raw=%t %s:%d %s", e.Severity, e.Raw, e.File, e.Line, e.Message))
	}
	want := []string{"WARNING raw=false kubelet.go:7 no swap", "INFO raw=true :0 plain"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("log = %q, want %q", got, want)
	}
}

// TestRunCommandError checks that a failing command's error is the
// process's, wrapped with the command's name.
func TestRunCommandError(t *testing.T) {
	_, _, result := commandTree(t, func() *exec.Cmd { return exec.Command("sh", "-c", "exit 3") })
	err := <-result
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Fatalf("RunCommand = %v, want exit status 3", err)
	}
	if !strings.Contains(err.Error(), "when running sh") {
		t.Errorf("RunCommand = %q, want the command's name in it", err)
	}
}

// TestRunCommandStartError checks that a command that cannot start says so.
func TestRunCommandStartError(t *testing.T) {
	_, _, result := commandTree(t, func() *exec.Cmd { return exec.Command("/nonexistent/cairn-test") })
	if err := <-result; err == nil || !strings.Contains(err.Error(), "when starting cairn-test") {
		t.Errorf("RunCommand = %v, want a start error naming cairn-test", err)
	}
}

// TestRunCommandOutputTaken checks that RunCommand refuses a command whose
// output already goes elsewhere.
func TestRunCommandOutputTaken(t *testing.T) {
	_, _, result := commandTree(t, func() *exec.Cmd {
		cmd := exec.Command("true")
		cmd.Stdout = &bytes.Buffer{}
		return cmd
	})
	if err := <-result; err == nil {
		t.Error("RunCommand with Stdout set succeeded")
	}
}

// TestRunCommandKillGrace checks that KillGrace replaces the supervisor's
// grace: a process that ignores SIGTERM is killed only after it.
func TestRunCommandKillGrace(t *testing.T) {
	const grace = 700 * time.Millisecond
	s, cancel, result := commandTreeWith(t, func() *exec.Cmd {
		return exec.Command("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done")
	}, []CommandOption{KillGrace(grace)}, withCommandKillGrace(50*time.Millisecond))
	waitLog(t, s.LogTree(), "root.cmd", "ready")
	start := time.Now()
	cancel()
	waitFor(t, s)
	took := time.Since(start)
	if err := <-result; err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("RunCommand = %v, want the process killed", err)
	}
	if took < grace {
		t.Errorf("the process was killed %v after the runnable stopped, want at least KillGrace's %v", took, grace)
	}
}

// TestRunCommandCancel checks that cancelling the runnable stops the
// process: SIGTERM for a process that heeds it, SIGKILL after the grace
// for one that does not. Either way no process is left behind.
func TestRunCommandCancel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		wantSignal string
	}{
		{"terminated", "echo ready; exec sleep 60", "signal: terminated"},
		{"killed", "trap '' TERM; echo ready; while :; do sleep 0.05; done", "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cmd *exec.Cmd // written before the runnable becomes healthy
			s, cancel, result := commandTree(t, func() *exec.Cmd {
				cmd = exec.Command("sh", "-c", tc.script)
				return cmd
			}, withCommandKillGrace(100*time.Millisecond))
			waitLog(t, s.LogTree(), "root.cmd", "ready")
			start := time.Now()
			cancel()
			waitFor(t, s)
			t.Logf("stopped in %v", time.Since(start))
			err := <-result
			if err == nil || !strings.Contains(err.Error(), tc.wantSignal) {
				t.Errorf("RunCommand = %v, want %q", err, tc.wantSignal)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("RunCommand = %v, want it to carry context.Canceled", err)
			}
			// Killed grandchildren stay in the group as zombies until
			// their new parent reaps them: give it a moment.
			fixture.Eventually(t, waitTimeout, "process group emptied", func() error {
				if err := syscall.Kill(-cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("process group %d: kill(0) = %v, want ESRCH: something is left", cmd.Process.Pid, err)
				}
				return nil
			})
		})
	}
}

// TestRunCommandInCgroup starts a command with InCgroup in a cgroup made
// for the test, and checks that the command itself says it runs there; a
// cgroup that does not exist is an error naming it.
func TestRunCommandInCgroup(t *testing.T) {
	_, _, result := commandTreeWith(t, func() *exec.Cmd { return exec.Command("true") },
		[]CommandOption{InCgroup("/nonexistent/cgroup")})
	if err := <-result; err == nil || !strings.Contains(err.Error(), "opening its cgroup /nonexistent/cgroup") {
		t.Errorf("RunCommand in a missing cgroup = %v, want an error naming it", err)
	}

	mount, own, err := cgroup2Mount()
	if err != nil {
		t.Skipf("not checking the placement itself: %v", err)
	}
	rel := path.Join(own, fmt.Sprintf("cairn-supervisor-test-%d", os.Getpid()))
	dir := filepath.Join(mount, rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("not checking the placement itself: cannot make a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing the test's cgroup: %v", err)
		}
	})
	s, _, result := commandTreeWith(t, func() *exec.Cmd { return exec.Command("cat", "/proc/self/cgroup") },
		[]CommandOption{InCgroup(dir)})
	lines := rawLines(t, s, result)
	if want := "0::" + rel; !slices.Contains(lines, want) {
		t.Errorf("the command's /proc/self/cgroup = %q, want a line %q", lines, want)
	}
}

// cgroup2Mount returns where a cgroup v2 hierarchy is mounted and this
// process's cgroup in it.
func cgroup2Mount() (mount, own string, err error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return "", "", err
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" && m.Root == "/" {
			mount = m.MountPoint
			break
		}
	}
	if mount == "" {
		return "", "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for line := range strings.Lines(string(cg)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return mount, p, nil
		}
	}
	return "", "", errors.New("/proc/self/cgroup names no cgroup v2 path")
}
