package main

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn.dev/cairn/pkg/procstat"
	"cairn.dev/cairn/proto/api"
)

// resourcesView is GetResources as cairnctl prints it.
type resourcesView struct {
	MemoryTotalBytes     uint64 `json:"memory_total_bytes"`
	MemoryAvailableBytes uint64 `json:"memory_available_bytes"`
	// OverMillis is the time between the two readings of --over, whose
	// memory figures are the second's; 0 without it.
	OverMillis uint64 `json:"over_millis,omitempty"`
	// The node's CPU time since it booted, its CPUs together (zero from a
	// node that does not report it): busy running anything, the kernel's
	// threads and interrupts among it, which no process lists; idle;
	// stolen by a hypervisor.
	CPUs            uint32 `json:"cpus,omitempty"`
	CPUBusyMillis   uint64 `json:"cpu_busy_millis,omitempty"`
	CPUIdleMillis   uint64 `json:"cpu_idle_millis,omitempty"`
	CPUStolenMillis uint64 `json:"cpu_stolen_millis,omitempty"`
	// CPUBusyOverMillis is the node's busy CPU time between the two
	// readings of --over, and CPUAllOverMillis all of its CPUs' time
	// then, busy, idle and stolen: its CPUs times the time between.
	CPUBusyOverMillis uint64        `json:"cpu_busy_over_millis,omitempty"`
	CPUAllOverMillis  uint64        `json:"cpu_all_over_millis,omitempty"`
	Processes         []processView `json:"processes"`
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
	// CPUOverMillis is the CPU time it used between the two readings of
	// --over (all of it for a process that started in between).
	CPUOverMillis uint64 `json:"cpu_over_millis,omitempty"`
	// KernelThread tells a thread of the kernel's (shown in brackets),
	// whose name may change as it works.
	KernelThread bool `json:"kernel_thread,omitempty"`
	// ParentPID is the process that reaps it when it ends.
	ParentPID int32 `json:"parent_pid"`
	// ChildrenCPUTimeMillis is the CPU time of the children it reaped
	// since it started (theirs included), and ChildrenCPUOverMillis
	// that of the ones it reaped between the two readings of --over,
	// from the first reading on: the programs it ran that ended.
	ChildrenCPUTimeMillis uint64 `json:"children_cpu_time_millis"`
	ChildrenCPUOverMillis uint64 `json:"children_cpu_over_millis,omitempty"`
}

func newNodeResourcesCommand(a *app) *cobra.Command {
	var all bool
	var over time.Duration
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
			"up to the memory they take together, their RESIDENT do not.\n\n" +
			"With --over, it reads the node twice, that long apart, and shows the CPU\n" +
			"each process used in between, busiest first, as a share of one CPU, and\n" +
			"the node's busy CPU time in all, its kernel's threads and interrupts too.\n" +
			"CHILD % is the CPU of the processes each one reaped in between (the\n" +
			"programs it ran that ended: a kubelet's mounts, a shim's runc), from the\n" +
			"first reading on.\n" +
			"The kernel's threads that have used CPU time are listed in [brackets].",
		Args: exactArgs("ID"),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if over < 0 || (over > 0 && over < time.Second) {
				return fmt.Errorf("--over %s: want at least 1s", over)
			}
			a.waitTimeout(cmd, over)
			return nil
		},
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			var first, res *api.GetResourcesResponse
			var start time.Time
			err := a.nodeManagement(ctx, o, id, "reading the resources of node "+id, func(c api.NodeManagementClient) error {
				var err error
				if over > 0 {
					if first, err = c.GetResources(ctx, &api.GetResourcesRequest{}); err != nil {
						return err
					}
					start = time.Now()
					fmt.Fprintf(a.errOut, "Reading node %s again in %s...\n", id, over)
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(over):
					}
				}
				res, err = c.GetResources(ctx, &api.GetResourcesRequest{})
				return err
			})
			if err != nil {
				return err
			}
			v := newResourcesView(res)
			if first != nil {
				v.cpuOver(first, time.Since(start))
			}
			return a.printResources(v, all)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "list every process, not the largest ten")
	cmd.Flags().DurationVar(&over, "over", 0, "read the node twice, this long apart, and show the CPU used in between")
	return cmd
}

// newResourcesView is res as cairnctl prints it.
func newResourcesView(res *api.GetResourcesResponse) resourcesView {
	v := resourcesView{
		MemoryTotalBytes:     res.GetMemoryTotalBytes(),
		MemoryAvailableBytes: res.GetMemoryAvailableBytes(),
		CPUs:                 res.GetCpus(),
		CPUBusyMillis:        res.GetCpuBusyMillis(),
		CPUIdleMillis:        res.GetCpuIdleMillis(),
		CPUStolenMillis:      res.GetCpuStolenMillis(),
		Processes:            []processView{},
	}
	for _, p := range res.GetProcesses() {
		v.Processes = append(v.Processes, processView{
			PID: p.GetPid(), Name: p.GetName(), ResidentBytes: p.GetResidentBytes(),
			AnonymousBytes: p.GetAnonymousBytes(), FileBytes: p.GetFileBytes(), SharedBytes: p.GetSharedBytes(),
			ProportionalBytes:     p.GetProportionalBytes(),
			CPUTimeMillis:         p.GetCpuTimeMillis(),
			KernelThread:          p.GetKernelThread(),
			ParentPID:             p.GetParentPid(),
			ChildrenCPUTimeMillis: p.GetChildrenCpuTimeMillis(),
		})
	}
	return v
}

// cpuOver sets each process's CPU time, and its reaped children's, since
// the reading first, taken elapsed before v's (procstat.Between), and
// sorts the processes busiest first, their children's time included.
func (v *resourcesView) cpuOver(first *api.GetResourcesResponse, elapsed time.Duration) {
	v.OverMillis = uint64(elapsed.Milliseconds())
	all := v.CPUBusyMillis + v.CPUIdleMillis + v.CPUStolenMillis
	allBefore := first.GetCpuBusyMillis() + first.GetCpuIdleMillis() + first.GetCpuStolenMillis()
	if first.GetCpus() > 0 && v.CPUBusyMillis >= first.GetCpuBusyMillis() && all > allBefore {
		v.CPUBusyOverMillis = v.CPUBusyMillis - first.GetCpuBusyMillis()
		v.CPUAllOverMillis = all - allBefore
	}
	for i, u := range procstat.Between(newResourcesView(first).cpuTimes(), v.cpuTimes()) {
		v.Processes[i].CPUOverMillis = uint64(u.CPU.Milliseconds())
		v.Processes[i].ChildrenCPUOverMillis = uint64(u.Children.Milliseconds())
	}
	sort.SliceStable(v.Processes, func(i, j int) bool {
		return v.Processes[i].CPUOverMillis+v.Processes[i].ChildrenCPUOverMillis > v.Processes[j].CPUOverMillis+v.Processes[j].ChildrenCPUOverMillis
	})
}

// cpuTimes is v's processes' CPU times, as procstat.Between takes them.
func (v resourcesView) cpuTimes() []procstat.Process {
	ps := make([]procstat.Process, len(v.Processes))
	for i, p := range v.Processes {
		ps[i] = procstat.Process{
			PID: int(p.PID), Name: p.Name, KernelThread: p.KernelThread, ParentPID: int(p.ParentPID),
			CPUTime:         time.Duration(p.CPUTimeMillis) * time.Millisecond,
			ChildrenCPUTime: time.Duration(p.ChildrenCPUTimeMillis) * time.Millisecond,
		}
	}
	return ps
}

func (a *app) printResources(v resourcesView, all bool) error {
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	var sum processView
	for _, p := range v.Processes {
		sum.ResidentBytes += p.ResidentBytes
		sum.AnonymousBytes += p.AnonymousBytes
		sum.FileBytes += p.FileBytes
		sum.ProportionalBytes += p.ProportionalBytes
		sum.CPUOverMillis += p.CPUOverMillis
		sum.ChildrenCPUOverMillis += p.ChildrenCPUOverMillis
	}
	fmt.Fprintf(a.out, "Memory: %s total, %s available\n", mib(v.MemoryTotalBytes), mib(v.MemoryAvailableBytes))
	fmt.Fprintf(a.out, "Processes: %s together (PSS), %s anonymous; %s resident, counting shared pages for each\n",
		mib(sum.ProportionalBytes), mib(sum.AnonymousBytes), mib(sum.ResidentBytes))
	switch {
	case v.OverMillis > 0:
		fmt.Fprintf(a.out, "CPU: the processes used %s over %s, %s of one CPU, and the children they reaped %s more\n",
			millis(sum.CPUOverMillis), millis(v.OverMillis), share(sum.CPUOverMillis, v.OverMillis), share(sum.ChildrenCPUOverMillis, v.OverMillis))
		if v.CPUAllOverMillis > 0 {
			// By the node's own clock: its CPUs' time over their number.
			fmt.Fprintf(a.out, "CPU: the node was busy %s, %s of one CPU (it has %s), its kernel's threads and interrupts included\n",
				millis(v.CPUBusyOverMillis), share(v.CPUBusyOverMillis, v.CPUAllOverMillis/uint64(v.CPUs)), cpuCount(v.CPUs))
		}
	case v.CPUs > 0:
		all := v.CPUBusyMillis + v.CPUIdleMillis + v.CPUStolenMillis
		fmt.Fprintf(a.out, "CPU: %s, %s busy since boot\n", cpuCount(v.CPUs), share(v.CPUBusyMillis, all))
	}
	fmt.Fprintln(a.out)
	shown := v.Processes
	if !all && len(shown) > 10 {
		shown = shown[:10]
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', tabwriter.AlignRight)
	over := ""
	if v.OverMillis > 0 {
		over = "CPU %\tCHILD %\t"
	}
	fmt.Fprintf(tw, "PID\tRESIDENT\tPSS\tANON\tFILE\tCPU TIME\t%s NAME\n", over)
	for _, p := range shown {
		if v.OverMillis > 0 {
			over = share(p.CPUOverMillis, v.OverMillis) + "\t" + share(p.ChildrenCPUOverMillis, v.OverMillis) + "\t"
		}
		name := p.Name
		if p.KernelThread {
			name = "[" + name + "]"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s %s\n", p.PID, mib(p.ResidentBytes), mib(p.ProportionalBytes), mib(p.AnonymousBytes), mib(p.FileBytes),
			millis(p.CPUTimeMillis), over, name)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing the resources: %w", err)
	}
	if len(shown) < len(v.Processes) {
		fmt.Fprintf(a.out, "(%d more processes; --all lists them)\n", len(v.Processes)-len(shown))
	}
	return nil
}

// cpuCount is n CPUs in words.
func cpuCount(n uint32) string {
	if n == 1 {
		return "1 CPU"
	}
	return fmt.Sprintf("%d CPUs", n)
}

// millis is a count of milliseconds as a duration.
func millis(ms uint64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// share is part of whole as a percentage with one decimal.
func share(part, whole uint64) string {
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// mib is a byte count in MiB with one decimal.
func mib(b uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}
