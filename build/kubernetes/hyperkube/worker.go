//go:build worker

package main

import (
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// The worker's build: the kubelet.
func init() {
	components["kubelet"] = kubelet.NewKubeletCommand
}
