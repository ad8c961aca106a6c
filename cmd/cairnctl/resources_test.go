package main

import (
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
)

// TestCPUOver counts each process's CPU time between two readings: a
// process in both by its difference, one that started in between by all
// of its time, as does one whose PID another process took meanwhile, but
// a kernel thread whose name changed with its work is the same thread; the
// busiest, with its reaped children, comes first. A process's reaped
// children count from the first reading on: a child that first listed
// and that ended since counts only what it used after.
func TestCPUOver(t *testing.T) {
	proc := func(pid int32, name string, cpu uint64) *api.GetResourcesResponse_Process {
		return &api.GetResourcesResponse_Process{Pid: pid, Name: name, CpuTimeMillis: cpu}
	}
	kthread := func(pid int32, name string, cpu uint64) *api.GetResourcesResponse_Process {
		p := proc(pid, name, cpu)
		p.KernelThread = true
		return p
	}
	reaper := func(p *api.GetResourcesResponse_Process, parent int32, children uint64) *api.GetResourcesResponse_Process {
		p.ParentPid, p.ChildrenCpuTimeMillis = parent, children
		return p
	}
	// Between the readings, the kubelet reaped "gone", which had used
	// 100 ms and its children 20 ms by the first reading and 30 ms more
	// after it, and a mount of 60 ms; init reaped "old", which had used
	// 9000 ms by the first reading and 50 ms after it.
	first := &api.GetResourcesResponse{Cpus: 2, CpuBusyMillis: 1000, CpuIdleMillis: 50000, CpuStolenMillis: 10, Processes: []*api.GetResourcesResponse_Process{
		proc(1, "init", 1000), reaper(proc(2, "kubelet", 5000), 1, 400), reaper(proc(3, "old", 9000), 1, 0),
		reaper(proc(9, "gone", 100), 2, 20),
		kthread(20, "kworker/0:1-events", 700),
	}}
	v := newResourcesView(&api.GetResourcesResponse{Cpus: 2, CpuBusyMillis: 4000, CpuIdleMillis: 67000, CpuStolenMillis: 10, Processes: []*api.GetResourcesResponse_Process{
		reaper(proc(1, "init", 1010), 0, 9050), reaper(proc(2, "kubelet", 6500), 1, 400+150+60), proc(3, "new", 300), proc(4, "shim", 50),
		kthread(20, "kworker/0:1-mm_percpu_wq", 900),
	}})
	v.cpuOver(first, 10*time.Second)
	if v.OverMillis != 10000 {
		t.Errorf("OverMillis = %d, want 10000", v.OverMillis)
	}
	want := []struct {
		name           string
		over, children uint64
	}{{"kubelet", 1500, 90}, {"new", 300, 0}, {"kworker/0:1-mm_percpu_wq", 200, 0}, {"init", 10, 50}, {"shim", 50, 0}}
	if len(v.Processes) != len(want) {
		t.Fatalf("%d processes, want %d", len(v.Processes), len(want))
	}
	for i, w := range want {
		if p := v.Processes[i]; p.Name != w.name || p.CPUOverMillis != w.over || p.ChildrenCPUOverMillis != w.children {
			t.Errorf("process %d = %s with %d ms and its children %d ms, want %s with %d and %d ms",
				i, p.Name, p.CPUOverMillis, p.ChildrenCPUOverMillis, w.name, w.over, w.children)
		}
	}
	// The node: 3 s busy of its two CPUs' 20 s.
	if v.CPUBusyOverMillis != 3000 || v.CPUAllOverMillis != 20000 {
		t.Errorf("node busy %d ms of %d ms, want 3000 of 20000", v.CPUBusyOverMillis, v.CPUAllOverMillis)
	}
	if got := share(1500, 10000); got != "15.0%" {
		t.Errorf("share(1500, 10000) = %q, want 15.0%%", got)
	}
}
