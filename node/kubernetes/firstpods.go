package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// A pod is admitted only once its namespace has the service account it
// runs as, "default" unless it names another, and its kubelet starts it
// only once the namespace has the ConfigMap kube-root-ca.crt, which its
// service account's projected volume carries. The controller-manager makes
// both in every namespace, but it starts once the apiserver is ready and
// builds all of its controllers before any runs: on a new emulated
// cluster, tens of seconds after the workers are Ready. So the reconciler
// makes both in the namespace "default" as soon as the apiserver serves,
// and a user's first pod there waits for its node only.
//
// It makes them and never applies them again: from then on they are the
// controller-manager's, which keeps kube-root-ca.crt's bundle and its
// description, and the user's, who may give the service account image
// pull secrets. An object that exists already is left as it is.

// firstPodObjects are the service account and the ConfigMap that a pod in
// namespace default needs, the latter holding the Kubernetes CA kubeCA (a
// PEM bundle).
func firstPodObjects(kubeCA []byte) []object {
	const ns = "/api/v1/namespaces/default/"
	return []object{
		{path: ns + "serviceaccounts", body: map[string]any{
			"apiVersion": "v1",
			"kind":       "ServiceAccount",
			"metadata":   map[string]any{"name": "default"},
		}},
		{path: ns + "configmaps", body: map[string]any{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   map[string]any{"name": "kube-root-ca.crt"},
			"data":       map[string]string{"ca.crt": string(kubeCA)},
		}},
	}
}

// runFirstPodObjects makes each of objects at its collection's path (POST)
// unless it exists, trying again every readyInterval while the apiserver
// refuses it (the namespace default is made by the apiserver itself, just
// after it serves), and is done once all exist.
func runFirstPodObjects(ctx context.Context, cl *apiClient, objects []object) error {
	lg := supervisor.Logger(ctx)
	start := time.Now()
	made, total := 0, len(objects)
	err := waitUntil(ctx, "the namespace default to take a first pod's objects", 30*time.Second, lg.Infof, func() (bool, error) {
		for len(objects) > 0 {
			o := objects[0]
			err := cl.do(ctx, http.MethodPost, o.path, "application/json", o.body, nil)
			switch {
			case err == nil:
				made++
			case !answered(err, http.StatusConflict):
				return false, fmt.Errorf("when making %s: %w", o.path, err)
			}
			objects = objects[1:]
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	lg.Infof("Made %d of a first pod's %d objects in the namespace default (the others were there) in %s", made, total, time.Since(start).Round(time.Millisecond))
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}
