package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"cairn.dev/cairn/proto/api"
)

// profileKinds are the kinds `node profile --kind` takes.
var profileKinds = map[string]api.ProfileKind{
	"cpu":       api.ProfileKind_PROFILE_KIND_CPU,
	"heap":      api.ProfileKind_PROFILE_KIND_HEAP,
	"allocs":    api.ProfileKind_PROFILE_KIND_ALLOCS,
	"goroutine": api.ProfileKind_PROFILE_KIND_GOROUTINE,
}

func newNodeProfileCommand(a *app) *cobra.Command {
	var kind, out string
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "profile ID --out FILE",
		Short: "Profile a node's core process (etcd, the curator and Cairn's services) for go tool pprof",
		Long: "profile asks the node itself (its management port) for a profile of its core\n" +
			"process, cairn-core, which runs etcd, the curator and every other service of\n" +
			"Cairn's, and writes it to FILE for `go tool pprof FILE`. A CPU profile\n" +
			"samples for --duration (at most 2m); heap, allocs and goroutine are\n" +
			"snapshots. Kubernetes' components serve their own profiles: see\n" +
			"docs/kubernetes.md.",
		Args: exactArgs("ID"),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, ok := profileKinds[kind]; !ok {
				return fmt.Errorf("--kind %q: want cpu, heap, allocs or goroutine", kind)
			}
			if duration < time.Second || duration > 2*time.Minute || duration%time.Second != 0 {
				return fmt.Errorf("--duration %s: want whole seconds, 1s to 2m", duration)
			}
			// The call lasts the profile's duration; --timeout bounds the rest.
			if kind == "cpu" {
				a.waitTimeout(cmd, duration)
			}
			return nil
		},
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			req := &api.GetProfileRequest{Kind: profileKinds[kind]}
			if req.Kind == api.ProfileKind_PROFILE_KIND_CPU {
				req.DurationSeconds = uint32(duration / time.Second)
				fmt.Fprintf(a.errOut, "Sampling node %s's CPU use for %s...\n", id, duration)
			}
			var res *api.GetProfileResponse
			err := a.nodeManagement(ctx, o, id, "profiling node "+id, func(c api.NodeManagementClient) error {
				var err error
				res, err = c.GetProfile(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			if err := writeFileAtomic(filepath.Dir(out), filepath.Base(out), res.GetProfile(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "Wrote the %s profile of %s (pid %d) on node %s to %s (%d bytes); read it with\n  go tool pprof %s\n",
				kind, res.GetProcess(), res.GetPid(), id, out, len(res.GetProfile()), out)
			return nil
		}),
	}
	cmd.Flags().StringVar(&kind, "kind", "cpu", "cpu, heap, allocs or goroutine")
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long a CPU profile samples")
	cmd.Flags().StringVar(&out, "out", "", "file to write the profile to")
	cmd.MarkFlagRequired("out")
	return cmd
}
