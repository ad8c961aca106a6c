package procstat

import (
	"testing"
	"time"
)

// TestBetween counts what each process used between two readings: a
// process in both by its difference, one that started in between by all
// of its time, as does one whose PID another process took meanwhile, but
// a kernel thread whose name changed with its work is the same thread. A
// process's reaped children count from the first reading on: a child
// that the first reading listed and that ended since counts only what it
// used after.
func TestBetween(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	proc := func(pid int, name string, cpu, parent, children int) Process {
		return Process{PID: pid, Name: name, CPUTime: ms(cpu), ParentPID: parent, ChildrenCPUTime: ms(children)}
	}
	kworker := func(name string, cpu int) Process {
		return Process{PID: 20, Name: name, CPUTime: ms(cpu), ParentPID: 2, KernelThread: true}
	}
	// Between the readings the kubelet reaped "gone", which had used
	// 100 ms, and its children 20 ms, by the first reading and 30 ms more
	// after it, and a mount of 60 ms; init reaped "old", which had used
	// 9000 ms by the first reading and 50 ms after it, and whose PID
	// "new" took.
	before := []Process{
		proc(1, "init", 1000, 0, 0), proc(2, "kubelet", 5000, 1, 400), proc(3, "old", 9000, 1, 0),
		proc(9, "gone", 100, 2, 20), kworker("kworker/0:1-events", 700),
	}
	after := []Process{
		proc(1, "init", 1010, 0, 9050), proc(2, "kubelet", 6500, 1, 400+150+60), proc(3, "new", 300, 1, 0),
		proc(4, "shim", 50, 1, 0), kworker("kworker/0:1-mm_percpu_wq", 900),
	}
	want := []struct {
		name          string
		cpu, children int
	}{{"init", 10, 50}, {"kubelet", 1500, 90}, {"new", 300, 0}, {"shim", 50, 0}, {"kworker/0:1-mm_percpu_wq", 200, 0}}
	uses := Between(before, after)
	if len(uses) != len(want) {
		t.Fatalf("%d uses, want %d", len(uses), len(want))
	}
	for i, w := range want {
		if u := uses[i]; u.Name != w.name || u.CPU != ms(w.cpu) || u.Children != ms(w.children) {
			t.Errorf("use %d = %s with %v and its children %v, want %s with %v and %v",
				i, u.Name, u.CPU, u.Children, w.name, ms(w.cpu), ms(w.children))
		}
	}
	// Children whose times the parent's do not yet show (not reaped yet)
	// count as none, not as a time that went back.
	uses = Between([]Process{proc(2, "kubelet", 10, 1, 0), proc(5, "zombie", 40, 2, 0)}, []Process{proc(2, "kubelet", 20, 1, 0)})
	if uses[0].CPU != ms(10) || uses[0].Children != 0 {
		t.Errorf("kubelet with an unreaped child = %v and its children %v, want 10ms and none", uses[0].CPU, uses[0].Children)
	}
}
