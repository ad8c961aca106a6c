package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// app is one run of cairnctl: the global flags and where output goes.
// Every command is a method of it, so that tests run commands in-process
// with their own output buffers and configuration directories.
type app struct {
	out    io.Writer
	errOut io.Writer

	configDir     string
	context       string
	endpoints     []string
	nodeEndpoints []string
	output        string
	timeout       time.Duration

	// now is the clock for heartbeat ages; tests fix it.
	now func() time.Time
	// connectTimeout, attemptTimeout and hedgeDelay pace failover
	// between endpoints (failover.go); tests change them.
	connectTimeout time.Duration
	attemptTimeout time.Duration
	hedgeDelay     time.Duration
	// rolloutPoll is how often a followed rollout is polled (rollout.go);
	// tests shorten it.
	rolloutPoll time.Duration
}

func newApp(out, errOut io.Writer) *app {
	return &app{
		out: out, errOut: errOut, now: time.Now,
		connectTimeout: defaultConnectTimeout,
		attemptTimeout: defaultAttemptTimeout,
		hedgeDelay:     defaultHedgeDelay,
		rolloutPoll:    defaultRolloutPoll,
	}
}

// newRootCommand builds the whole command tree over a.
func newRootCommand(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "cairnctl",
		Short: "Manage a Cairn cluster",
		Long: "cairnctl writes node parameters onto Cairn images, takes ownership of a\n" +
			"new cluster and manages its nodes over mutually authenticated gRPC.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(*cobra.Command, []string) error { return a.checkGlobals() },
	}
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	f := root.PersistentFlags()
	f.StringVar(&a.configDir, "config", "", "configuration directory (default $XDG_CONFIG_HOME/cairnctl)")
	f.StringVar(&a.context, "context", "", "context of the configuration directory to use (default: the one config use-context selected)")
	f.StringArrayVar(&a.endpoints, "endpoint", nil, "curator HOST:PORT to dial; repeat to fail over between several, the first preferred (default: those the context stores)")
	f.StringArrayVar(&a.nodeEndpoints, "node-endpoint", nil, "ID=HOST:PORT where to reach a node's management port; repeatable")
	f.StringVarP(&a.output, "output", "o", outputTable, "output format of data: table or json")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "deadline of every call to the cluster")

	root.AddCommand(
		newParamsCommand(a),
		newTakeOwnershipCommand(a),
		newOwnerCommand(a),
		newClusterCommand(a),
		newNodeCommand(a),
		newLogsCommand(a),
		newConfigCommand(a),
		newKubeconfigCommand(a),
		newKubernetesCommand(a),
		newMetricsCommand(a),
	)
	return root
}

// checkGlobals validates the global flags before any command runs.
func (a *app) checkGlobals() error {
	switch a.output {
	case outputTable, outputJSON:
	default:
		return fmt.Errorf("-o %q: want %s or %s", a.output, outputTable, outputJSON)
	}
	if a.timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", a.timeout)
	}
	if a.context != "" && a.context != defaultContext {
		if err := checkContextName(a.context); err != nil {
			return fmt.Errorf("--context: %w", err)
		}
	}
	for _, ep := range a.endpoints {
		if err := checkHostPort(ep); err != nil {
			return fmt.Errorf("--endpoint: %w", err)
		}
	}
	if _, err := parseNodeEndpoints(a.nodeEndpoints); err != nil {
		return err
	}
	return nil
}

// withTimeout bounds one command's calls to the cluster by --timeout.
func (a *app) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// printf writes to the command's output; a failed write to stdout is not
// worth failing a command that already changed the cluster.
func (a *app) printf(format string, args ...any) {
	fmt.Fprintf(a.out, format, args...)
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return fmt.Errorf("%s takes %d argument(s), %s; got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}
