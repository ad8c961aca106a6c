package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn.dev/cairn/proto/api"
)

// resourcesView is GetResources as cairnctl prints it.
type resourcesView struct {
	MemoryTotalBytes     uint64        `json:"memory_total_bytes"`
	MemoryAvailableBytes uint64        `json:"memory_available_bytes"`
	Processes            []processView `json:"processes"`
}

// processView is one process of a node.
type processView struct {
	PID               int32  `json:"pid"`
	Name              string `json:"name"`
	ResidentBytes     uint64 `json:"resident_bytes"`
	AnonymousBytes    uint64 `json:"anonymous_bytes"`
	FileBytes         uint64 `json:"file_bytes"`
	SharedBytes       uint64 `json:"shared_bytes"`
	ProportionalBytes uint64 `json:"proportional_bytes"`
	CPUTimeMillis     uint64 `json:"cpu_time_millis"`
}

func newNodeResourcesCommand(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "resources ID",
		Short: "Show a node's memory and its processes' resident memory and CPU time",
		Long: "resources asks the node itself (its management port) for its memory and,\n" +
			"for each process, the resident memory and CPU time: /init runs every\n" +
			"supervised service (etcd and the curator among them); Kubernetes'\n" +
			"components, containerd and pods are processes of their own. The largest\n" +
			"ten are shown, all with --all or -o json. ANON is a process's own memory\n" +
			"(heap, stacks); FILE the pages of files it maps, its program among them,\n" +
			"which processes mapping the same file share. PSS counts each page in\n" +
			"part, one share for each process that maps it: the processes' PSS add\n" +
			"up to the memory they take together, their RESIDENT do not.",
		Args: exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			var res *api.GetResourcesResponse
			err := a.nodeManagement(ctx, o, id, "reading the resources of node "+id, func(c api.NodeManagementClient) error {
				var err error
				res, err = c.GetResources(ctx, &api.GetResourcesRequest{})
				return err
			})
			if err != nil {
				return err
			}
			return a.printResources(res, all)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "list every process, not the largest ten")
	return cmd
}

func (a *app) printResources(res *api.GetResourcesResponse, all bool) error {
	v := resourcesView{
		MemoryTotalBytes:     res.GetMemoryTotalBytes(),
		MemoryAvailableBytes: res.GetMemoryAvailableBytes(),
		Processes:            []processView{},
	}
	for _, p := range res.GetProcesses() {
		v.Processes = append(v.Processes, processView{
			PID: p.GetPid(), Name: p.GetName(), ResidentBytes: p.GetResidentBytes(),
			AnonymousBytes: p.GetAnonymousBytes(), FileBytes: p.GetFileBytes(), SharedBytes: p.GetSharedBytes(),
			ProportionalBytes: p.GetProportionalBytes(),
			CPUTimeMillis:     p.GetCpuTimeMillis(),
		})
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	var sum processView
	for _, p := range v.Processes {
		sum.ResidentBytes += p.ResidentBytes
		sum.AnonymousBytes += p.AnonymousBytes
		sum.FileBytes += p.FileBytes
		sum.ProportionalBytes += p.ProportionalBytes
	}
	fmt.Fprintf(a.out, "Memory: %s total, %s available\n", mib(v.MemoryTotalBytes), mib(v.MemoryAvailableBytes))
	fmt.Fprintf(a.out, "Processes: %s together (PSS), %s anonymous; %s resident, counting shared pages for each\n\n",
		mib(sum.ProportionalBytes), mib(sum.AnonymousBytes), mib(sum.ResidentBytes))
	shown := v.Processes
	if !all && len(shown) > 10 {
		shown = shown[:10]
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "PID\tRESIDENT\tPSS\tANON\tFILE\tCPU TIME\t NAME\n")
	for _, p := range shown {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t %s\n", p.PID, mib(p.ResidentBytes), mib(p.ProportionalBytes), mib(p.AnonymousBytes), mib(p.FileBytes),
			(time.Duration(p.CPUTimeMillis) * time.Millisecond).String(), p.Name)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing the resources: %w", err)
	}
	if len(shown) < len(v.Processes) {
		fmt.Fprintf(a.out, "(%d more processes; --all lists them)\n", len(v.Processes)-len(shown))
	}
	return nil
}

// mib is a byte count in MiB with one decimal.
func mib(b uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}
