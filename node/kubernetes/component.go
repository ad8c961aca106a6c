package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// errRenew ends a component whose certificates are half-way through their
// life, so that its supervisor starts it again with fresh ones.
var errRenew = errors.New("certificates due for renewal")

// stopped is what a runnable returns once the context it runs under with
// a renewal deadline (context.WithDeadlineCause, errRenew) is done: ctx's
// error if its unit stopped, errRenew if its certificates are due.
func stopped(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errRenew
}

// runComponent runs a Kubernetes component as a child process, in its
// group below the layout's cgroup (cgroup.go): its klog output goes into
// the runnable's log with each line's severity, a crash is the runnable's
// death (the supervisor restarts it with backoff), and at renewAt it is
// stopped and errRenew returned. A zero renewAt never renews. extra are
// more options for supervisor.RunCommand.
func (l Layout) runComponent(ctx context.Context, cmd *exec.Cmd, renewAt time.Time, extra ...supervisor.CommandOption) error {
	opts := append([]supervisor.CommandOption{supervisor.ParseKlog()}, extra...)
	if l.Cgroup != "" {
		dir, err := l.componentCgroup(cmd.Path)
		if err != nil {
			return fmt.Errorf("when starting %s: %w", cmd.Path, err)
		}
		opts = append(opts, supervisor.InCgroup(dir))
	}
	rctx := ctx
	if !renewAt.IsZero() {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadlineCause(ctx, renewAt, errRenew)
		defer cancel()
		supervisor.Logger(ctx).Infof("Certificates are renewed at %s", renewAt.UTC().Format(time.RFC3339))
	}
	err := supervisor.RunCommand(rctx, cmd, opts...)
	if ctx.Err() == nil && errors.Is(context.Cause(rctx), errRenew) {
		return fmt.Errorf("%w: stopped %s to renew them", errRenew, cmd.Path)
	}
	if err == nil {
		return fmt.Errorf("%s exited without being asked to", cmd.Path)
	}
	return err
}

// componentGOGC is Go's GOGC for Kubernetes' components, containerd and
// its shims (which inherit containerd's environment): a collection starts
// once the heap has grown by half of what the last one left live, not by
// all of it as Go's default has it, so a component's heap peaks at 1.5
// times its live data rather than twice. The apiserver, measured first
// (its heap went from 195 to 157 MB on an idle controller of make
// cluster), now runs with APIServerGOGC instead.
const componentGOGC = "50"

// APIServerGOGC is the apiserver's GOGC: its live heap is the largest by
// far, about 94 MB on an idle controller, and at 30 it peaks at 1.3 times
// that rather than 1.5. On an idle controller of make cluster its
// anonymous memory went from 183 to 161 MiB. At rest it allocates about
// 36 MB a minute, so it collects about every 47 s instead of every 78 s.
// Its start costs more: at 50 the collector took 6.8 s of its first 67 s
// of CPU, and at 30 it does 1.7 times that work, which did not show in
// roles → ready against the noise of the runs compared (67 s at 30; 53
// and 66 s at 50). Lowered to 30 only once the start was over, it saved
// a third of that memory (177 MiB rather than 161), likely because the
// heap the start left stays fragmented.
const APIServerGOGC = "30"

// command returns the command running the program at path (l.bin,
// l.workerBin) with args, with PATH set to the payload's directory and the
// system partition's programs (the kubelet runs mount, containerd its
// shim), componentGOGC, and nothing else of init's environment.
func (l Layout) command(path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + l.Bin + ":/system/usr/bin:/system/usr/sbin", "HOME=/", "GOGC=" + componentGOGC}
	return cmd
}
