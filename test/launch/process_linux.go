package launch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// childAttr puts a child in a process group of its own, so that a terminal's
// Ctrl-C reaches only the launcher (which then powers the node down), and
// has the kernel kill it when the launcher dies, so that neither a crashed
// test nor a killed launcher leaves a qemu or swtpm running.
//
// The parent-death signal follows the thread that started the child. Go
// ends threads only when a goroutine locked to one returns without
// unlocking; nothing in this package does that.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// kill sends SIGKILL to the process that cmd started. Go signals it through
// a pidfd, so a process that has exited and been reaped already is never
// mistaken for a new one with the same PID.
func kill(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := cmd.Process.Signal(syscall.SIGKILL)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// stateDirPrefix starts the name of every node's temporary state directory.
const stateDirPrefix = "cairn-launch-"

// launcherPIDFile holds, in each state directory, the PID of the launcher
// that made it.
const launcherPIDFile = "launcher.pid"

// sweepStale removes the state directories under tmp whose launcher is dead:
// they were left by a launcher that was killed before it could clean up.
// Directories without a PID file may be in the making and are kept.
func sweepStale(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, stateDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, launcherPIDFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}

// tailBuffer keeps the last bytes written to it: a process's stderr, for
// error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the kept bytes, trimmed, or "(empty)".
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return "(empty)"
	}
	return s
}
