// Command hyperkube is the Kubernetes components a Cairn node runs, in one
// static binary built twice:
//
//   - hyperkube: kube-apiserver, kube-controller-manager, kube-scheduler
//     and kube-proxy, for controllers;
//   - hyperkube with the build tag worker: the kubelet and kube-proxy, for
//     workers.
//
// It runs the component its name says, so that the system image carries it
// with a symlink per component,
//
//	/system/kubernetes/bin/kube-apiserver -> hyperkube
//	/system/kubernetes/bin/worker/kubelet -> hyperkube
//
// or the one its first argument names, with the rest as that component's
// arguments:
//
//	hyperkube kube-scheduler --version
//
// # Why one binary, and why two builds of it
//
// The components share most of their code (client-go, apimachinery, the
// API types, the apiserver library); as separate binaries the system image
// would carry that code once for each. Each component is still its own
// process: the node starts the binary once per component, never inside
// its own process, so a crashing kubelet takes nothing else with it.
//
// A process keeps resident the pages of its binary that its start
// touched, and a Go program's start runs the package initializers of all
// that is linked in. When all five components were one binary, a worker's
// kube-proxy kept 69 MiB of it resident, the apiserver's API registries
// among them; built with the kubelet alone, 48 MiB. The processes of one
// binary share its pages, so each node runs one build: a controller the
// control plane's, a worker the worker's (a node with both roles runs
// both).
//
// Every component runs through its own cobra command constructor and
// component-base's cli.Run, as its upstream main does; the blank imports
// are those of the upstream mains (JSON logging, client-go and version
// metrics, time zones for CronJobs).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// components are the commands hyperkube runs, by the names their upstream
// binaries have: kube-proxy in both builds, the others added by
// control.go or worker.go.
var components = map[string]func(ctx context.Context) *cobra.Command{
	"kube-proxy": func(context.Context) *cobra.Command {
		return proxy.NewProxyCommand()
	},
}

func main() {
	name, args, ok := component(os.Args)
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: hyperkube COMPONENT [ARGS...], or a link named COMPONENT; components: %s\n",
			strings.Join(names(), ", "))
		os.Exit(2)
	}
	cmd := components[name](context.Background())
	cmd.SetArgs(args)
	os.Exit(cli.Run(cmd))
}

// component returns the component argv asks for and its arguments: the
// name the binary was run by, else the first argument.
func component(argv []string) (name string, args []string, ok bool) {
	if len(argv) == 0 {
		return "", nil, false
	}
	if base := filepath.Base(argv[0]); components[base] != nil {
		return base, argv[1:], true
	}
	if len(argv) > 1 && components[argv[1]] != nil {
		return argv[1], argv[2:], true
	}
	return "", nil, false
}

func names() []string {
	var n []string
	for name := range components {
		n = append(n, name)
	}
	slices.Sort(n)
	return n
}
