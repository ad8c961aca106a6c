//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestKubernetes runs Kubernetes on a two-node cluster: node 0 is the
// controller (ConsensusMember and KubernetesController), node 1 the
// worker. Stock kubectl, built from the same Kubernetes release, drives
// it with a kubeconfig that cairnctl wrote:
//
//	(a) the owner's kubeconfig reaches the apiserver, and the worker's
//	    Node turns Ready, labelled for its role;
//	(b) a pod of the pause image, which the node imported itself, runs
//	    on the worker;
//	(c) a pod whose image does not exist says why it cannot start;
//	(d) the worker loses KubernetesWorker: its Node is deleted; it gets the
//	    role back: its Node is Ready again;
//	(e) the worker reboots: its Node is Ready again and a Deployment's pod
//	    on it runs again.
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
		k.waitFor(t, n1.Name()+"'s role label", 3*time.Minute, func() error {
			return k.nodeLabel(t, n1.ID(), "node-role.kubernetes.io/worker")
		})
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

	t.Run("d-worker-role-removed-and-back", func(t *testing.T) {
		start := time.Now()
		s.cairnctl(t, c, "node", "remove-role", n1.ID(), "KubernetesWorker")
		k.waitFor(t, n1.Name()+"'s Node deleted", 5*time.Minute, func() error {
			_, err := k.run(t, "get", "node", n1.ID())
			if err == nil {
				return fmt.Errorf("node %s still exists", n1.ID())
			}
			if !strings.Contains(err.Error(), "NotFound") {
				return err
			}
			return nil
		})
		s.step("KubernetesWorker removed → Node deleted", time.Since(start))
		k.waitFor(t, n1.Name()+" saying its worker left nothing behind", 2*time.Minute, func() error {
			out := s.cairnctl(t, c, "logs", n1.ID(), "--dn", "root.roleserve.kubeworker", "--min-severity", "warning")
			if strings.Contains(out, "Cleaning up after the worker") {
				return fmt.Errorf("the worker left something behind:\n%s", out)
			}
			out = s.cairnctl(t, c, "logs", n1.ID(), "--dn", "root.roleserve.kubeworker")
			if !strings.Contains(out, "no pod, shim or mount left") {
				return fmt.Errorf("no word of the stopped worker yet")
			}
			return nil
		})
		start = time.Now()
		s.cairnctl(t, c, "node", "add-role", n1.ID(), "KubernetesWorker")
		k.waitFor(t, n1.Name()+"'s Node Ready again", 10*time.Minute, func() error {
			return k.nodeReady(t, n1.ID())
		})
		s.step("KubernetesWorker given again → Node Ready", time.Since(start))
	})

	t.Run("e-worker-reboots", func(t *testing.T) {
		// A Deployment's pod on the worker, which must run again after
		// the reboot.
		k.apply(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"keep"},"spec":{
			"selector":{"matchLabels":{"app":"keep"}},
			"template":{"metadata":{"labels":{"app":"keep"}},"spec":{
				"nodeSelector":{"kubernetes.io/hostname":"`+n1.ID()+`"},
				"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.10","imagePullPolicy":"Never"}]}}}}`)
		k.waitFor(t, "the Deployment available", 5*time.Minute, func() error {
			return k.deploymentAvailable(t, "keep")
		})
		before, err := k.keepContainer(t)
		if err != nil {
			t.Fatal(err)
		}
		mark, start := n1.Mark(), time.Now()
		s.cairnctl(t, c, "node", "reboot", n1.ID())
		boot := s.waitNode(t, n1, mark, launch.CairnBoot.Init)
		s.waitNode(t, n1, boot.Index, launch.Mark(marker.Joined, "node", n1.ID()))
		s.step("worker reboot → rejoined", time.Since(start))
		k.waitFor(t, n1.Name()+"'s Node Ready after its reboot", 10*time.Minute, func() error {
			// Ready from before the reboot does not count: the kubelet
			// of the new boot must say so.
			if err := k.nodeReady(t, n1.ID()); err != nil {
				return err
			}
			after, err := k.keepContainer(t)
			switch {
			case err != nil:
				return err
			case after == before:
				return fmt.Errorf("the pod still shows its container from before the reboot")
			}
			return k.deploymentAvailable(t, "keep")
		})
		s.step("worker reboot → Node Ready, its pod running again", time.Since(start))
	})
	if t.Failed() {
		s.dumpKubernetes(t, c, k)
	}
}

// keepContainer returns the ID of the running container of the keep
// Deployment's pod.
func (k *kube) keepContainer(t *testing.T) (string, error) {
	var pods struct {
		Items []struct {
			Status struct {
				ContainerStatuses []struct {
					ContainerID string `json:"containerID"`
					Ready       bool
				}
			}
		}
	}
	if err := k.getJSON(t, &pods, "pods", "-l", "app=keep"); err != nil {
		return "", err
	}
	if len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
		return "", fmt.Errorf("want one pod of keep with one container, got %+v", pods.Items)
	}
	cs := pods.Items[0].Status.ContainerStatuses[0]
	if !cs.Ready || cs.ContainerID == "" {
		return "", fmt.Errorf("keep's container is not running and ready: %+v", cs)
	}
	return cs.ContainerID, nil
}

// deploymentAvailable returns nil once every replica of the Deployment
// name is available.
func (k *kube) deploymentAvailable(t *testing.T, name string) error {
	var d struct {
		Spec   struct{ Replicas int }
		Status struct {
			AvailableReplicas int `json:"availableReplicas"`
			UpdatedReplicas   int `json:"updatedReplicas"`
			Replicas          int
		}
	}
	if err := k.getJSON(t, &d, "deployment", name); err != nil {
		return err
	}
	if d.Status.AvailableReplicas < d.Spec.Replicas || d.Status.UpdatedReplicas < d.Spec.Replicas || d.Status.Replicas != d.Spec.Replicas {
		return fmt.Errorf("deployment %s: %d of %d replicas available and updated", name, d.Status.AvailableReplicas, d.Spec.Replicas)
	}
	return nil
}

// nodeLabel returns nil once the Node name carries label.
func (k *kube) nodeLabel(t *testing.T, name, label string) error {
	var node struct {
		Metadata struct {
			Labels map[string]string
		}
	}
	if err := k.getJSON(t, &node, "node", name); err != nil {
		return err
	}
	if _, ok := node.Metadata.Labels[label]; !ok {
		return fmt.Errorf("node %s has labels %v, not %s", name, node.Metadata.Labels, label)
	}
	return nil
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

// apply applies the object manifest (JSON or YAML).
func (k *kube) apply(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	k.mustRun(t, "apply", "-f", f)
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
