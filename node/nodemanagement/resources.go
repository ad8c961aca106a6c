package nodemanagement

import (
	"context"

	"cairn.dev/cairn/pkg/procstat"
	"cairn.dev/cairn/proto/api"
)

// GetResources implements NodeManagement.GetResources from procfs.
func (s *Service) GetResources(context.Context, *api.GetResourcesRequest) (*api.GetResourcesResponse, error) {
	return readResources("/proc")
}

// readResources reads the memory, the CPU time, the processes and the
// kernel's busy threads of the procfs at proc.
func readResources(proc string) (*api.GetResourcesResponse, error) {
	mem, procs, threads, err := procstat.ReadWithKernelThreads(proc)
	if err != nil {
		return nil, err
	}
	cpu, err := procstat.ReadCPU(proc)
	if err != nil {
		return nil, err
	}
	res := &api.GetResourcesResponse{
		MemoryTotalBytes: mem.TotalBytes, MemoryAvailableBytes: mem.AvailableBytes,
		Cpus: uint32(cpu.Count), CpuBusyMillis: uint64(cpu.Busy.Milliseconds()),
		CpuIdleMillis: uint64(cpu.Idle.Milliseconds()), CpuStolenMillis: uint64(cpu.Stolen.Milliseconds()),
	}
	procs = append(procs, threads...)
	for _, p := range procs {
		var pss uint64
		if !p.KernelThread {
			if pss, err = procstat.Proportional(proc, p.PID); err != nil {
				// It ended since it was listed, as Read leaves such out.
				continue
			}
		}
		res.Processes = append(res.Processes, &api.GetResourcesResponse_Process{
			Pid:                   int32(p.PID),
			Name:                  p.Name,
			ResidentBytes:         p.ResidentBytes,
			CpuTimeMillis:         uint64(p.CPUTime.Milliseconds()),
			AnonymousBytes:        p.AnonymousBytes,
			FileBytes:             p.FileBytes,
			SharedBytes:           p.SharedBytes,
			ProportionalBytes:     pss,
			KernelThread:          p.KernelThread,
			ParentPid:             int32(p.ParentPID),
			ChildrenCpuTimeMillis: uint64(p.ChildrenCPUTime.Milliseconds()),
		})
	}
	return res, nil
}
