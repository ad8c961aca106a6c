package procstat

import "time"

// A Use is what one process used between two readings of a node.
type Use struct {
	// Process is the process as the later reading has it.
	Process
	// CPU is its own CPU time since the earlier reading: all of it for a
	// process that started in between.
	CPU time.Duration
	// Children is the CPU time of the children it reaped in between,
	// theirs included, from the earlier reading on: the programs it ran
	// that ended, which no reading of living processes shows.
	Children time.Duration
}

// Same tells whether before, of an earlier reading, is p: a process
// under the same PID and name, or the same kernel thread, whose name
// follows its work (a kworker's names the queue it last ran). A PID
// under another name was taken again by a new process.
func Same(before, p Process) bool {
	return before.PID == p.PID && (before.Name == p.Name || before.KernelThread && p.KernelThread)
}

// Between returns what each process of after used since before, in
// after's order.
//
// A process's reaped children's time grows by each child's whole life
// as it reaps it. A child that before lists and after does not ended in
// between; what it and its own reaped children had used by the earlier
// reading is taken from its parent's of then, so that only what it used
// in between counts. A child handed to another reaper since (its parent
// ended) is taken from its first parent's, which may then count too
// little, never below zero.
func Between(before, after []Process) []Use {
	was := map[int]Process{}
	for _, b := range before {
		was[b.PID] = b
	}
	is := map[int]Process{}
	for _, p := range after {
		is[p.PID] = p
	}
	endedUsed := map[int]time.Duration{} // by the parent of before
	for _, b := range before {
		if p, ok := is[b.PID]; !ok || !Same(b, p) {
			endedUsed[b.ParentPID] += b.CPUTime + b.ChildrenCPUTime
		}
	}
	uses := make([]Use, len(after))
	for i, p := range after {
		u := Use{Process: p, CPU: p.CPUTime, Children: p.ChildrenCPUTime}
		if b, ok := was[p.PID]; ok && Same(b, p) {
			if b.CPUTime <= p.CPUTime {
				u.CPU -= b.CPUTime
			}
			u.Children = less(p.ChildrenCPUTime, b.ChildrenCPUTime+endedUsed[p.PID])
		}
		uses[i] = u
	}
	return uses
}

// less is a-b, or zero where b is larger.
func less(a, b time.Duration) time.Duration {
	if b > a {
		return 0
	}
	return a - b
}
