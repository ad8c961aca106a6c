// Command hyperkube is every Kubernetes component a Cairn node runs, in one
// static binary: kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy. It runs the component its name says, so that the
// system image carries it once with a symlink per component,
//
//	/system/kubernetes/bin/kube-apiserver -> hyperkube
//
// or the one its first argument names, with the rest as that component's
// arguments:
//
//	hyperkube kubelet --version
//
// # Why one binary
//
// The components share most of their code (client-go, apimachinery, the
// API types, the apiserver library); as five binaries the system image
// would carry that code five times. Each component is still its own
// process: the node starts this binary once per component, never inside
// its own process, so a crashing kubelet takes nothing else with it.
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
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components are the commands hyperkube runs, by the names their upstream
// binaries have.
var components = map[string]func(ctx context.Context) *cobra.Command{
	"kube-apiserver": func(context.Context) *cobra.Command {
		return apiserver.NewAPIServerCommand()
	},
	"kube-controller-manager": func(context.Context) *cobra.Command {
		return controllermanager.NewControllerManagerCommand()
	},
	"kube-scheduler": func(context.Context) *cobra.Command {
		return scheduler.NewSchedulerCommand()
	},
	"kubelet": kubelet.NewKubeletCommand,
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
