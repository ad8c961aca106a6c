package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// commandWaitDelay bounds how long RunCommand waits, once the process has
// exited, for its output pipe to close: a grandchild that inherited the pipe
// must not keep the runnable from returning.
const commandWaitDelay = time.Second

// RunCommand runs cmd as the work of the runnable whose context ctx is:
//
//   - the process's stdout and stderr go, line by line, into the runnable's
//     raw log, or parsed into leveled entries with ParseKlog (cmd.Stdout and
//     cmd.Stderr must be nil; RunCommand sets them);
//   - the runnable signals Healthy as soon as the process has started;
//   - when ctx is cancelled, the process's group gets SIGTERM and, if it
//     has not exited two seconds later, SIGKILL. The process is put into a
//     process group of its own for that, unless cmd.SysProcAttr is set, in
//     which case only the process itself is signalled. Once the process
//     has exited, whatever is left in its process group is killed;
//   - it returns once the process has exited: nil for a zero exit status,
//     or the process's error wrapped with the command's name.
//
// A command that exits with status zero still leaves the runnable to decide
// what that means: signal Done and return nil for a one-shot command, or
// return an error to have it restarted.
func RunCommand(ctx context.Context, cmd *exec.Cmd, opts ...CommandOption) error {
	n, err := fromContext(ctx)
	if err != nil {
		return err
	}
	var o commandOptions
	for _, opt := range opts {
		opt(&o)
	}
	name := filepath.Base(cmd.Path)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("when starting %s: %w", name, context.Cause(ctx))
	}
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return fmt.Errorf("when running %s: Stdout and Stderr must be nil, RunCommand logs them", name)
	}
	// One writer for both streams: os/exec then shares one pipe between
	// them, and lines reach the log whole and in order.
	raw := RawLogger(ctx)
	if o.klog {
		raw = n.sup.lt.KlogFor(n.dn)
	}
	defer raw.Close()
	cmd.Stdout = raw
	cmd.Stderr = raw
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = commandWaitDelay
	}
	group := cmd.SysProcAttr == nil
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if o.cgroup != "" {
		fd, err := syscall.Open(o.cgroup, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("when starting %s: opening its cgroup %s: %w", name, o.cgroup, err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("when starting %s: %w", name, err)
	}
	Signal(ctx, SignalHealthy)

	// The stopper goroutine lives until the process has exited (exited is
	// closed after Wait returns); on the way it signals the process if ctx
	// ends first.
	exited := make(chan struct{})
	stopperDone := make(chan struct{})
	grace := n.sup.commandKillGrace
	if o.killGrace > 0 {
		grace = o.killGrace
	}
	go func() {
		defer close(stopperDone)
		stopCommand(ctx, cmd, group, grace, exited)
	}()
	err = cmd.Wait()
	close(exited)
	<-stopperDone
	if group {
		// Leave nothing of the command behind: whatever it started and
		// left in its process group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}

	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("when running %s: %w (stopped because: %w)", name, err, context.Cause(ctx))
	}
	return fmt.Errorf("when running %s: %w", name, err)
}

// A CommandOption changes how RunCommand logs or runs a command.
type CommandOption func(*commandOptions)

type commandOptions struct {
	klog   bool
	cgroup string
	// killGrace, when not zero, replaces the supervisor's grace between
	// SIGTERM and SIGKILL.
	killGrace time.Duration
}

// KillGrace makes RunCommand wait d, instead of the supervisor's two
// seconds, between SIGTERM and SIGKILL when the runnable stops: for a
// process that has work to finish as it stops, such as handing a leader
// lease over.
func KillGrace(d time.Duration) CommandOption {
	return func(o *commandOptions) { o.killGrace = d }
}

// InCgroup makes RunCommand start the command in the cgroup (v2) whose
// directory is dir, from its first instruction on (clone3's
// CLONE_INTO_CGROUP), rather than in the caller's. RunCommand sets the
// placement on cmd.SysProcAttr, the caller's own if it set one.
func InCgroup(dir string) CommandOption {
	return func(o *commandOptions) { o.cgroup = dir }
}

// ParseKlog makes RunCommand read the command's output as klog's (or
// logrus') lines, logging each as a leveled entry with its own severity
// (logtree.KlogFor) rather than as raw lines.
func ParseKlog() CommandOption {
	return func(o *commandOptions) { o.klog = true }
}

// stopCommand waits for ctx to end or the process to exit. If ctx ends
// first, it sends SIGTERM, then SIGKILL after grace unless the process exits
// in between.
func stopCommand(ctx context.Context, cmd *exec.Cmd, group bool, grace time.Duration, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	signalCommand(cmd, group, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		signalCommand(cmd, group, syscall.SIGKILL)
	}
}

// signalCommand sends sig to the process, or to its whole process group.
// Errors are ignored: the only likely one is that it has exited already.
func signalCommand(cmd *exec.Cmd, group bool, sig syscall.Signal) {
	if group {
		err := syscall.Kill(-cmd.Process.Pid, sig)
		if err == nil || !errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	_ = cmd.Process.Signal(sig)
}
