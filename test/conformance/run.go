package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runner runs shards of Kubernetes' e2e.test against one cluster, each
// shard a process of its own with a directory of its own:
//
//	DIR/SHARD/e2e.log        what e2e.test printed
//	DIR/SHARD/junit_01.xml   its JUnit report
//	DIR/SHARD/result.json    written last: the shard is done
//
// A shard whose result.json names the same commit is done and is not run
// again, so a run that stopped (Ctrl-C, a reboot of the host) resumes
// with the shards it had not finished.
type runner struct {
	// e2e is the path of e2e.test.
	e2e string
	// kubeconfig reaches the cluster as its administrator.
	kubeconfig string
	// kubectl is the kubectl the suite's kubectl tests run: the one
	// built from the payload's release, not whatever PATH finds.
	kubectl string
	// dir holds the results.
	dir string
	// commit is Cairn's version the cluster runs: results of another
	// are run again.
	commit string
	// parallel is how many shards run at once (serial shards run alone).
	parallel int
	// timeout bounds each shard.
	timeout time.Duration
	// repoList, if set, is the KUBE_TEST_REPO_LIST file that maps the
	// test images' registries.
	repoList string
	// again runs every shard, done or not.
	again bool
	// progress is how often running shards are reported.
	progress time.Duration
	// terminating, if set, lists the cluster's namespaces being deleted,
	// for which each serial shard waits first (settle), at most settleFor,
	// asking every settlePoll.
	terminating           func(context.Context) ([]string, error)
	settleFor, settlePoll time.Duration
	// logf reports progress; the runner calls it from one goroutine at
	// a time.
	logf  func(format string, args ...any)
	logMu sync.Mutex
}

// say reports through logf.
func (r *runner) say(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	r.logf(format, args...)
}

// shardResult is a shard's result.json.
type shardResult struct {
	Shard    string    `json:"shard"`
	Labels   string    `json:"labels"`
	Focus    string    `json:"focus,omitempty"`
	Skip     string    `json:"skip,omitempty"`
	Commit   string    `json:"commit"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	ExitCode int       `json:"exit_code"`
	Specs    []spec    `json:"specs"`
	// Interrupted: the run stopped before the shard ended. Its specs are
	// those its report named when e2e.test stopped, and it has no
	// result.json: the next run runs it again.
	Interrupted bool `json:"interrupted,omitempty"`
}

func (r shardResult) tally() tally {
	var t tally
	for _, s := range r.Specs {
		t.add(s.Outcome)
	}
	return t
}

// run runs the shards that are not done, parallel ones first, and
// returns the results of every shard in shards.
func (r *runner) run(ctx context.Context, shards []shard) ([]shardResult, error) {
	results := make([]shardResult, len(shards))
	var todo, serial []int
	for i, s := range shards {
		if res, ok := r.done(s); ok {
			r.say("shard %s: done at %s (%v), kept; -again runs it again", s.Name, res.Commit, res.tally())
			results[i] = res
			continue
		}
		if s.Serial {
			serial = append(serial, i)
		} else {
			todo = append(todo, i)
		}
	}
	running := newRunningSet()
	stop := r.reportProgress(ctx, running)
	defer stop()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, max(r.parallel, 1))
	runOne := func(i int) {
		res, err := r.runShard(ctx, shards[i], running)
		mu.Lock()
		defer mu.Unlock()
		results[i] = res
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", shards[i].Name, err))
		}
	}
	for _, i := range todo {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			runOne(i)
		})
	}
	wg.Wait()
	for _, i := range serial {
		r.settle(ctx)
		if ctx.Err() != nil {
			break
		}
		runOne(i)
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, fmt.Errorf("stopped before every shard ran (run again to resume): %w", err))
	}
	return results, errors.Join(errs...)
}

// settle waits until no namespace of the cluster is being deleted, at
// most r.settleFor. The suite's tests delete their namespaces as they end
// and do not wait, and a worker of one emulated CPU takes minutes to tear
// down their pods (a namespace of 100 pods, about 10), which a serial
// test that started meanwhile would share with them. Past r.settleFor,
// or when the namespaces cannot be listed, the shard starts anyway and
// the log says why.
func (r *runner) settle(ctx context.Context) {
	if r.terminating == nil {
		return
	}
	start := time.Now()
	var said time.Time
	for {
		names, err := r.terminating(ctx)
		waited := time.Since(start).Round(time.Second)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.say("not waiting for the namespaces being deleted: %v", err)
			return
		case len(names) == 0:
			if !said.IsZero() {
				r.say("the namespaces of earlier tests are gone after %s", waited)
			}
			return
		case waited >= r.settleFor:
			r.say("namespaces still being deleted after %s, the next shard starts beside them: %s", waited, strings.Join(names, ", "))
			return
		case said.IsZero() || time.Since(said) >= time.Minute:
			r.say("waiting for the namespaces of earlier tests to be deleted (%s so far): %s", waited, strings.Join(names, ", "))
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.settlePoll):
		}
	}
}

// done returns the result of a shard that is done at r.commit.
func (r *runner) done(s shard) (shardResult, bool) {
	if r.again {
		return shardResult{}, false
	}
	b, err := os.ReadFile(filepath.Join(r.dir, s.Name, "result.json"))
	if err != nil {
		return shardResult{}, false
	}
	var res shardResult
	if err := json.Unmarshal(b, &res); err != nil || res.Commit != r.commit || res.Labels != s.Labels || res.Focus != s.Focus || res.Skip != s.Skip {
		return shardResult{}, false
	}
	return res, true
}

// runShard runs one shard's e2e.test to its end and writes its
// result.json. A shard whose specs fail is a result, not an error; an
// e2e.test that could not run, or left no report, is an error.
func (r *runner) runShard(ctx context.Context, s shard, running *runningSet) (shardResult, error) {
	dir := filepath.Join(r.dir, s.Name)
	if err := os.RemoveAll(dir); err != nil {
		return shardResult{}, fmt.Errorf("when clearing the shard's results: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return shardResult{}, fmt.Errorf("when making the shard's directory: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return shardResult{}, fmt.Errorf("when creating the shard's log: %w", err)
	}
	defer logFile.Close()

	res := shardResult{Shard: s.Name, Labels: s.Labels, Focus: s.Focus, Skip: s.Skip, Commit: r.commit, Started: time.Now()}
	r.say("shard %s: started (%s); log in %s", s.Name, s.filter(), logFile.Name())
	running.add(s.Name, res.Started)
	defer running.remove(s.Name)

	// e2e.test stops itself at the suite's timeout and writes its
	// report; the context's deadline, later, is for one that hangs.
	sctx, cancel := context.WithTimeout(ctx, r.timeout+5*time.Minute)
	defer cancel()
	args := []string{
		"--kubeconfig=" + r.kubeconfig,
		"--kubectl-path=" + r.kubectl,
		"--provider=skeleton",
		"--report-dir=" + dir,
		"--ginkgo.label-filter=" + s.Labels,
		"--ginkgo.timeout=" + r.timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
	if s.Focus != "" {
		args = append(args, "--ginkgo.focus="+s.Focus)
	}
	if s.Skip != "" {
		args = append(args, "--ginkgo.skip="+s.Skip)
	}
	cmd := exec.CommandContext(sctx, r.e2e, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = os.Environ()
	if r.repoList != "" {
		cmd.Env = append(cmd.Env, "KUBE_TEST_REPO_LIST="+r.repoList)
	}
	// Interrupted, e2e.test gets the chance to write its report.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = time.Minute
	runErr := cmd.Run()
	res.Ended = time.Now()
	var exit *exec.ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &exit):
		res.ExitCode = exit.ExitCode()
	default:
		return res, fmt.Errorf("when running %s: %w", r.e2e, runErr)
	}
	took := res.Ended.Sub(res.Started).Round(time.Second)
	// Interrupted: not done, so that the next run runs it again. What it
	// reported before it stopped still counts in this run's summary,
	// marked unfinished.
	res.Interrupted = ctx.Err() != nil
	specs, err := readJUnitFile(filepath.Join(dir, "junit_01.xml"))
	switch {
	case err != nil && res.Interrupted:
		r.say("shard %s: interrupted after %s, with no readable report: %v", s.Name, took, err)
		return res, nil
	case err != nil:
		return res, fmt.Errorf("e2e.test exited with %d and left no readable report (see %s): %w", res.ExitCode, logFile.Name(), err)
	}
	res.Specs = specs
	if res.Interrupted {
		r.say("shard %s: interrupted after %s: %v so far; the next run runs it again", s.Name, took, res.tally())
		return res, nil
	}
	if err := writeResult(filepath.Join(dir, "result.json"), res); err != nil {
		return res, err
	}
	r.say("shard %s: ended after %s: %v", s.Name, took, res.tally())
	return res, nil
}

// writeResult writes res to path atomically: a result.json is whole or
// absent.
func writeResult(path string, res shardResult) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("when encoding the shard's result: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("when writing the shard's result: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("when putting the shard's result in place: %w", err)
	}
	return nil
}

// runningSet is the shards running now, with when each started.
type runningSet struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func newRunningSet() *runningSet { return &runningSet{since: map[string]time.Time{}} }

func (s *runningSet) add(name string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since[name] = t
}

func (s *runningSet) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, name)
}

func (s *runningSet) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s.since)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", name, time.Since(s.since[name]).Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// reportProgress logs the running shards every r.progress until the
// returned func is called.
func (r *runner) reportProgress(ctx context.Context, running *runningSet) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.progress)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if s := running.String(); s != "" {
					r.say("running: %s", s)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
