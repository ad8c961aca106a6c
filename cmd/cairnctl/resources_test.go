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
// busiest comes first.
func TestCPUOver(t *testing.T) {
	proc := func(pid int32, name string, cpu uint64) *api.GetResourcesResponse_Process {
		return &api.GetResourcesResponse_Process{Pid: pid, Name: name, CpuTimeMillis: cpu}
	}
	kthread := func(pid int32, name string, cpu uint64) *api.GetResourcesResponse_Process {
		p := proc(pid, name, cpu)
		p.KernelThread = true
		return p
	}
	first := &api.GetResourcesResponse{Cpus: 2, CpuBusyMillis: 1000, CpuIdleMillis: 50000, CpuStolenMillis: 10, Processes: []*api.GetResourcesResponse_Process{
		proc(1, "init", 1000), proc(2, "kubelet", 5000), proc(3, "old", 9000), proc(9, "gone", 100),
		kthread(20, "kworker/0:1-events", 700),
	}}
	v := newResourcesView(&api.GetResourcesResponse{Cpus: 2, CpuBusyMillis: 4000, CpuIdleMillis: 67000, CpuStolenMillis: 10, Processes: []*api.GetResourcesResponse_Process{
		proc(1, "init", 1010), proc(2, "kubelet", 6500), proc(3, "new", 300), proc(4, "shim", 50),
		kthread(20, "kworker/0:1-mm_percpu_wq", 900),
	}})
	v.cpuOver(first, 10*time.Second)
	if v.OverMillis != 10000 {
		t.Errorf("OverMillis = %d, want 10000", v.OverMillis)
	}
	want := []struct {
		name string
		over uint64
	}{{"kubelet", 1500}, {"new", 300}, {"kworker/0:1-mm_percpu_wq", 200}, {"shim", 50}, {"init", 10}}
	if len(v.Processes) != len(want) {
		t.Fatalf("%d processes, want %d", len(v.Processes), len(want))
	}
	for i, w := range want {
		if p := v.Processes[i]; p.Name != w.name || p.CPUOverMillis != w.over {
			t.Errorf("process %d = %s with %d ms, want %s with %d ms", i, p.Name, p.CPUOverMillis, w.name, w.over)
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
