//go:build !worker

package main

import (
	"context"

	"github.com/spf13/cobra"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// The control plane's build: the apiserver, the controller manager and the
// scheduler.
func init() {
	components["kube-apiserver"] = func(context.Context) *cobra.Command {
		return apiserver.NewAPIServerCommand()
	}
	components["kube-controller-manager"] = func(context.Context) *cobra.Command {
		return controllermanager.NewControllerManagerCommand()
	}
	components["kube-scheduler"] = func(context.Context) *cobra.Command {
		return scheduler.NewSchedulerCommand()
	}
}
