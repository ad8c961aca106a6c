package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/metrics"
	"cairn.dev/cairn/node/modules"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// runCore is the core process: it loads the modules it needs, runs the supervision tree
// until it is asked to stop or its root dies, and returns the exit code
// that tells PID 1 what to do.
func runCore() int {
	con := openConsoles()
	// Signals are caught from the start and queued for the power runnable;
	// until it runs, a shutdown request waits rather than killing the core.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)

	// The kernel names a process after the file it runs, /proc/self/exe
	// here: "exe" in every listing of the node's processes (cairnctl node
	// resources among them). The name of its argv[0] says what it is.
	if err := os.WriteFile("/proc/self/comm", []byte(coreArgv0), 0); err != nil {
		con.Printf("when naming the core's process %s: %v", coreArgv0, err)
	}

	cl, err := cmdline.Read()
	if err != nil {
		con.Printf("%v", err)
	}
	fl, notes := parseFlags(cl)
	for _, n := range notes {
		con.Printf("%s", n)
	}

	lt := logtree.New()
	stopConsoles := con.attach(lt, fl.logSeverity)
	defer stopConsoles()
	initLog := lt.LeveledFor("init")

	// The rest of the modules are the storage child's (node/modules).
	if _, err := modules.LoadBoot(context.Background(), lt.LeveledFor("init.modules")); err != nil {
		initLog.Errorf("when loading the boot modules: %v", err)
		con.Printf("boot modules not loaded: %v", err)
	}
	if err := mountEFIVars(); err != nil {
		initLog.Errorf("%v", err)
		con.Printf("%v", err)
	}
	if err := writeOSRelease(osReleasePath, version()); err != nil {
		initLog.Errorf("%v", err)
	}
	if err := writeProtocols(protocolsPath); err != nil {
		initLog.Errorf("%v", err)
	}

	buttons := openPowerButtons("/sys/class/input", "/dev/input", true, lt.LeveledFor("init.power"))
	defer buttons.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := &stopRequest{
		cancel:   cancel,
		con:      con,
		deadline: stopDeadline,
		// The tree is stuck: leave it, so that PID 1 can still sync,
		// unmount and finish the machine.
		expired: func(a action) { os.Exit(a.exitCode()) },
	}
	children := []child{
		{"power", (&power{signals: sigs, request: stop.request, buttons: buttons}).run},
	}
	restarts := metrics.NewRestarts()
	children = append(children, nodeChildren(fl, con.Printf, initLog, lt, restarts, stop.request)...)
	s := supervisor.New(fl.test.ArmTestPoint(ctx), rootRunnable(children, fl.test.RootFailure()),
		supervisor.WithRootFatal(), supervisor.WithLogTree(lt), supervisor.WithRestartHook(restarts.Inc))
	con.Printf("supervisor started")

	select {
	case <-ctx.Done():
		if a, _ := stop.requested(); a == reboot {
			loadKexecEarly(con)
		}
	case <-s.Done():
	}
	err = s.Wait()
	a, requested := stop.requested()
	if !requested {
		con.Printf("root runnable failed: %v", err)
		return exitFailed
	}
	con.Printf("supervisor stopped")
	return a.exitCode()
}

// stopRequest turns the first request to stop the node into the end of the
// supervision tree.
type stopRequest struct {
	cancel context.CancelFunc
	con    *consoles
	// deadline is how long the tree may take to stop; then expired runs.
	deadline time.Duration
	expired  func(action)

	mu   sync.Mutex
	a    action
	done bool
}

// request stops the tree for a: it cancels the root's context and, should
// the tree not have stopped within the deadline, says so and calls
// expired. Requests after the first are ignored.
func (r *stopRequest) request(a action) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.a, r.done = a, true
	r.con.Printf("stopping for %s", a)
	r.cancel()
	time.AfterFunc(r.deadline, func() {
		r.con.Printf("supervisor did not stop within %v; going on with the %s", r.deadline, a)
		r.expired(a)
	})
}

// requested returns the action asked for, if any.
func (r *stopRequest) requested() (action, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.a, r.done
}
