// Command conformance runs the [Conformance] tests of Kubernetes' own
// end-to-end suite (e2e.test, built from the payload's Kubernetes release)
// against a Cairn cluster, in shards: one per SIG for the tests that may
// run beside others, a few at once, then the serial ones alone. Each
// shard's JUnit report and log stay in its directory; a shard that ended
// is not run again at the same version of Cairn, so a run that stopped resumes
// where it was. At the end it prints, and writes to DIR/summary.md, the
// outcomes by SIG, the shards interrupted or not run, and every failed or
// skipped test with its reason.
//
//	go run ./test/conformance -e2e out/conformance/e2e.test \
//	    -kubeconfig out/cluster/kubeconfig -dir out/conformance \
//	    [-shards network,apps] [-focus REGEXP] [-background]
//
// `make conformance` builds e2e.test and runs it against `make cluster`'s
// cluster; docs/conformance.md records the results.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	e2e := flag.String("e2e", "out/conformance/e2e.test", "Kubernetes' e2e.test, built from the payload's release")
	kubeconfig := flag.String("kubeconfig", "out/cluster/kubeconfig", "kubeconfig of the cluster, as its administrator")
	kubectl := flag.String("kubectl", "out/kubectl", "kubectl, built from the payload's release: the suite's kubectl tests run it, and it checks that the cluster answers before the shards start")
	dir := flag.String("dir", "out/conformance", "directory of the results, one per shard")
	commit := flag.String("commit", "", "Cairn's version the cluster runs, if its Nodes do not say it (results of another are run again)")
	shardList := flag.String("shards", "", "comma-separated shards to run (default: all)")
	focus := flag.String("focus", "", "run only the tests whose names match this regular expression: of the conformance tests, as the shard focus, or with -shards, of those shards, each as the shard focus-SHARD")
	parallel := flag.Int("parallel", 2, "shards that run at once")
	timeout := flag.Duration("timeout", 6*time.Hour, "deadline of each shard")
	repoList := flag.String("repo-list", "", "KUBE_TEST_REPO_LIST file mapping the test images' registries")
	again := flag.Bool("again", false, "run shards that are done too")
	background := flag.Bool("background", false, "detach, writing the log to DIR/runner.log")
	list := flag.Bool("list", false, "list the shards and exit")
	flag.Parse()

	all := defaultShards()
	if *list {
		for _, s := range all {
			fmt.Printf("%-16s %s\n", s.Name, s.filter())
		}
		return
	}
	shards, err := checkArgs(all, *shardList, *focus, *kubeconfig)
	if err == nil && *commit == "" {
		// Asked before detaching, so that a run against a cluster that
		// is not up fails where its caller sees it.
		*commit, err = clusterVersion(context.Background(), *kubectl, *kubeconfig)
	}
	var kubectlPath string
	if err == nil {
		kubectlPath, err = filepath.Abs(*kubectl)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		os.Exit(2)
	}
	if err := run(*background, *dir, func(ctx context.Context) error {
		r := &runner{
			e2e: *e2e, kubeconfig: *kubeconfig, kubectl: kubectlPath, dir: *dir, commit: *commit,
			parallel: *parallel, timeout: *timeout, repoList: *repoList, again: *again,
			progress: 5 * time.Minute,
			terminating: func(ctx context.Context) ([]string, error) {
				return terminatingNamespaces(ctx, kubectlPath, *kubeconfig)
			},
			settleFor: 20 * time.Minute, settlePoll: 10 * time.Second,
			logf: func(format string, args ...any) {
				fmt.Printf("%s conformance: %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
			},
		}
		start := time.Now()
		results, runErr := r.run(ctx, shards)
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "Conformance of Cairn %s (%d shards, %s):\n\n", *commit, len(shards), time.Since(start).Round(time.Second))
		var ran []shardResult
		var notRun []string
		for i, res := range results {
			if res.Shard == "" {
				notRun = append(notRun, shards[i].Name)
			} else {
				ran = append(ran, res)
			}
		}
		summary(&buf, ran, notRun)
		os.Stdout.Write(buf.Bytes())
		if err := os.WriteFile(filepath.Join(*dir, "summary.md"), buf.Bytes(), 0o644); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("when writing the summary: %w", err))
		}
		return runErr
	}); err != nil {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		os.Exit(1)
	}
}

// checkArgs returns the shards to run, or what is wrong with the flags.
func checkArgs(all []shard, shardList, focus, kubeconfig string) ([]shard, error) {
	shards, err := selectShards(all, shardList)
	if err != nil {
		return nil, err
	}
	switch {
	case focus != "" && shardList != "":
		for i, s := range shards {
			shards[i] = s.narrowed(focus)
		}
	case focus != "":
		shards = []shard{focusShard(focus)}
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, fmt.Errorf("no kubeconfig of a cluster (start one with make cluster in another terminal): %w", err)
	}
	return shards, nil
}

// run runs f under a lock of dir, so that two runners never share one
// directory of results, until SIGINT or SIGTERM. With background it
// starts itself again, detached, with its output in dir/runner.log, and
// returns at once.
func run(background bool, dir string, f func(context.Context) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("when making the results' directory: %w", err)
	}
	if background {
		return detach(dir)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("when opening the lock of %s: %w", dir, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another run uses %s (its log: %s): %w", dir, filepath.Join(dir, "runner.log"), err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return f(ctx)
}

// detach starts this program again without -background, in a session of
// its own, its output appended to dir/runner.log.
func detach(dir string) error {
	logPath := filepath.Join(dir, "runner.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("when opening the runner's log: %w", err)
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("when finding this program: %w", err)
	}
	args := slices.DeleteFunc(slices.Clone(os.Args[1:]), func(a string) bool {
		return a == "-background" || a == "--background" || a == "-background=true" || a == "--background=true"
	})
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("when starting the runner in the background: %w", err)
	}
	fmt.Printf("conformance: running in the background (pid %d); follow it with\n  tail -f %s\nand stop it with kill %d; running it again resumes.\n", cmd.Process.Pid, logPath, cmd.Process.Pid)
	return cmd.Process.Release()
}

// clusterVersion returns the version of Cairn that every Node of the
// cluster of kubeconfig runs, from the OS image its kubelet reports
// ("Cairn <version>"): the results are kept per version. It fails at once
// when the cluster is not up, rather than each shard waiting half an hour
// for nodes, and when the Nodes run different versions (a rollout half
// done).
func clusterVersion(ctx context.Context, kubectl, kubeconfig string) (string, error) {
	out, err := kubectlGet(ctx, kubectl, kubeconfig, "nodes", `{range .items[*]}{.metadata.name}={.status.nodeInfo.osImage}{"\n"}{end}`)
	if err != nil {
		return "", fmt.Errorf("the cluster of %s does not list its nodes (is make cluster running?): %w", kubeconfig, err)
	}
	return versionOfNodes(out)
}

// kubectlGet lists resource in the cluster of kubeconfig through
// kubectl, printed by jsonpath, within a minute. Its error holds what
// kubectl printed to stderr.
func kubectlGet(ctx context.Context, kubectl, kubeconfig, resource, jsonpath string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "--request-timeout=50s",
		"get", resource, "-o", "jsonpath="+jsonpath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// terminatingNamespaces returns the names of the namespaces of the
// cluster of kubeconfig that are being deleted.
func terminatingNamespaces(ctx context.Context, kubectl, kubeconfig string) ([]string, error) {
	out, err := kubectlGet(ctx, kubectl, kubeconfig, "namespaces", `{range .items[?(@.status.phase=="Terminating")]}{.metadata.name}{"\n"}{end}`)
	if err != nil {
		return nil, fmt.Errorf("when listing the namespaces being deleted: %w", err)
	}
	return strings.Fields(out), nil
}

// versionOfNodes returns the version of Cairn that every line of nodes
// (NAME=OS image) names.
func versionOfNodes(nodes string) (string, error) {
	var version string
	var seen []string
	for line := range strings.Lines(nodes) {
		name, image, _ := strings.Cut(strings.TrimSpace(line), "=")
		if name == "" {
			continue
		}
		v, ok := strings.CutPrefix(image, "Cairn ")
		if !ok || v == "" {
			return "", fmt.Errorf("node %s runs %q, not Cairn: say its version with -commit", name, image)
		}
		if version != "" && v != version {
			return "", fmt.Errorf("the nodes run different versions of Cairn (%s: %s; %s: %s): finish the rollout first, or say the version with -commit", seen[0], version, name, v)
		}
		version = v
		seen = append(seen, name)
	}
	if version == "" {
		return "", errors.New("the cluster has no nodes: nothing to run the tests on")
	}
	return version, nil
}
