//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch/cluster"
)

// TestKubernetes runs Kubernetes on a two-node cluster: node 0 is the
// controller (ConsensusMember and KubernetesController), node 1 the
// worker. Stock kubectl, built from the same Kubernetes release, drives
// it with a kubeconfig that cairnctl wrote:
//
//	(a) the owner's kubeconfig reaches the apiserver, and the worker's
//	    Node turns Ready;
//	(b) a pod of the pause image, which the node imported itself, runs
//	    on the worker;
//	(c) a pod whose image does not exist says why it cannot start.
func TestKubernetes(t *testing.T) {
	s := newSuite(t, 35*time.Minute)
	c := s.newCluster(2, 0)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the cluster: %v", err)
	}
	for _, p := range c.Phases() {
		s.step(p.Name, p.Duration)
	}
	n0, n1 := c.Node(0), c.Node(1)
	k := &kube{s: s, kubectl: artifact(t, "kubectl"), config: filepath.Join(t.TempDir(), "kubeconfig")}

	rolesGiven := time.Now()
	s.cairnctl(t, c, "node", "add-role", n0.ID(), "KubernetesController")
	s.cairnctl(t, c, "node", "add-role", n1.ID(), "KubernetesWorker")

	t.Run("a-worker-ready", func(t *testing.T) {
		s.cairnctl(t, c, "kubeconfig", "--out", k.config, "--apiserver", "https://"+n0.KubernetesAddr())
		k.waitFor(t, "the apiserver to answer the owner", 15*time.Minute, func() error {
			_, err := k.run(t, "get", "--raw", "/readyz")
			return err
		})
		s.step("roles given → apiserver ready for the owner", time.Since(rolesGiven))
		k.waitFor(t, n1.Name()+"'s Node Ready", 10*time.Minute, func() error {
			return k.nodeReady(t, n1.ID())
		})
		s.step("roles given → worker Node Ready", time.Since(rolesGiven))
	})
	if t.Failed() {
		s.dumpKubernetes(t, c, k)
		return
	}

	t.Run("b-pod-runs", func(t *testing.T) {
		start := time.Now()
		k.mustRun(t, "run", "pause", "--image=registry.k8s.io/pause:3.10", "--image-pull-policy=Never",
			"--restart=Never", `--overrides={"spec":{"nodeName":"`+n1.ID()+`"}}`)
		k.waitFor(t, "the pause pod Running", 5*time.Minute, func() error {
			return k.podPhase(t, "pause", "Running")
		})
		s.step("pod created → Running", time.Since(start))
	})

	t.Run("c-missing-image", func(t *testing.T) {
		k.mustRun(t, "run", "missing", "--image=10.42.0.1:5999/cairn/does-not-exist:1", "--restart=Never")
		k.waitFor(t, "the missing image's pull error", 5*time.Minute, func() error {
			reason, msg, err := k.waitingReason(t, "missing")
			if err != nil {
				return err
			}
			if reason != "ErrImagePull" && reason != "ImagePullBackOff" {
				return fmt.Errorf("container waits for %q (%s), want a pull error", reason, msg)
			}
			if !strings.Contains(msg, "does-not-exist") {
				return fmt.Errorf("the pull error %q does not name the image", msg)
			}
			return nil
		})
	})
	if t.Failed() {
		s.dumpKubernetes(t, c, k)
	}
}

// kube runs stock kubectl with the owner's kubeconfig.
type kube struct {
	s       *suite
	kubectl string
	config  string
}

// run runs kubectl with args and returns its standard output.
func (k *kube) run(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(k.s.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectl, append([]string{"--kubeconfig", k.config, "--request-timeout=60s"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// mustRun is run, failing t on error.
func (k *kube) mustRun(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := k.run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor calls check every two seconds until it succeeds, failing t with
// check's last error after d.
func (k *kube) waitFor(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || k.s.ctx.Err() != nil {
			t.Fatalf("waited %s for %s: %v", d, what, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// getJSON decodes kubectl get ... -o json into out.
func (k *kube) getJSON(t *testing.T, out any, args ...string) error {
	t.Helper()
	b, err := k.run(t, append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding kubectl get %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// nodeReady returns nil once the Node name has condition Ready True.
func (k *kube) nodeReady(t *testing.T, name string) error {
	var node struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			}
		}
	}
	if err := k.getJSON(t, &node, "node", name); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			if c.Status == "True" {
				return nil
			}
			return fmt.Errorf("node %s Ready=%s: %s: %s", name, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

// podPhase returns nil once pod name is in phase.
func (k *kube) podPhase(t *testing.T, name, phase string) error {
	var pod struct {
		Status struct {
			Phase string
		}
	}
	if err := k.getJSON(t, &pod, "pod", name); err != nil {
		return err
	}
	if pod.Status.Phase != phase {
		return fmt.Errorf("pod %s is %s", name, pod.Status.Phase)
	}
	return nil
}

// waitingReason returns why the first container of pod name waits.
func (k *kube) waitingReason(t *testing.T, name string) (reason, message string, err error) {
	var pod struct {
		Status struct {
			ContainerStatuses []struct {
				State struct {
					Waiting *struct{ Reason, Message string }
				}
			}
		}
	}
	if err := k.getJSON(t, &pod, "pod", name); err != nil {
		return "", "", err
	}
	cs := pod.Status.ContainerStatuses
	if len(cs) == 0 || cs[0].State.Waiting == nil {
		return "", "", fmt.Errorf("pod %s's container is not waiting", name)
	}
	return cs[0].State.Waiting.Reason, cs[0].State.Waiting.Message, nil
}

// dumpKubernetes logs what a failed Kubernetes step leaves to look at: the
// nodes and pods as kubectl sees them, and each node's Kubernetes logs.
func (s *suite) dumpKubernetes(t *testing.T, c *cluster.Cluster, k *kube) {
	t.Helper()
	for _, args := range [][]string{{"get", "nodes", "-o", "wide"}, {"get", "pods", "-A", "-o", "wide"}, {"describe", "pods"}} {
		out, err := k.run(t, args...)
		t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range c.Nodes() {
		for _, dn := range []string{"root.roleserve.kubecontroller", "root.roleserve.kubeworker"} {
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			out, err := c.Cairnctl(ctx, "logs", n.ID(), "--backlog", "300", "--dn", dn)
			cancel()
			t.Logf("%s's %s logs (%v):\n%s", n.Name(), dn, err, out)
		}
	}
}
