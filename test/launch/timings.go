package launch

import (
	"fmt"
	"time"
)

// BootMarks are the console lines at which the phases of a boot end.
type BootMarks struct {
	// Kernel matches the kernel's first line.
	Kernel Matcher
	// Init matches the first line of the init process.
	Init Matcher
	// Ready matches the line after which the node counts as booted.
	Ready Matcher
}

// CairnBoot marks a Cairn node's boot: its /init says it started, then
// that the supervisor runs.
var CairnBoot = BootMarks{
	Kernel: Substring("Linux version"),
	Init:   Substring("cairn: init started"),
	Ready:  Substring("cairn: supervisor started"),
}

// NullBoot marks the boot of the null image, whose init only says that it
// powers off: the floor under any init on the same kernel and firmware.
var NullBoot = BootMarks{
	Kernel: Substring("Linux version"),
	Init:   Substring("null init"),
	Ready:  Substring("null init: powering off"),
}

// Timings are the phases of one boot.
type Timings struct {
	// ToKernel runs from starting qemu to the kernel's start: firmware,
	// boot loader, loading and decompressing the kernel.
	ToKernel time.Duration
	// KernelToInit runs from the kernel's start to the init's first line.
	KernelToInit time.Duration
	// InitToReady runs from the init's first line to the Ready line.
	InitToReady time.Duration
	// Total runs from starting qemu to the Ready line, on the host clock.
	Total time.Duration
}

// Phase is one named phase of a boot.
type Phase struct {
	Name     string
	Duration time.Duration
}

// PhaseNames are the names that Phases gives, in order.
var PhaseNames = []string{"qemu start → kernel", "kernel → /init", "/init → ready", "total boot"}

// Phases returns the timings in boot order, named after PhaseNames.
func (t Timings) Phases() []Phase {
	d := []time.Duration{t.ToKernel, t.KernelToInit, t.InitToReady, t.Total}
	p := make([]Phase, len(d))
	for i := range d {
		p[i] = Phase{Name: PhaseNames[i], Duration: d[i]}
	}
	return p
}

// BootTimings splits the boot that starts at console line from into
// phases. start is the host time at which qemu started (Node.Started).
//
// The kernel writes its first lines to the serial port only once its
// console driver is up, well after it started. So the kernel's start on
// the host clock is taken as the earliest of (line received − uptime
// printed on the line) over the boot's stamped lines, and phases inside
// the guest use the uptimes where both lines carry one. This assumes the
// guest clock runs at host speed, which holds for KVM and for TCG.
func BootTimings(start time.Time, lines []Line, from int, marks BootMarks) (Timings, error) {
	kernel, ok := find(lines, from, marks.Kernel)
	if !ok {
		return Timings{}, fmt.Errorf("no kernel line (%v) on the console", marks.Kernel)
	}
	initLine, ok := find(lines, kernel.Index, marks.Init)
	if !ok {
		return Timings{}, fmt.Errorf("no init line (%v) on the console", marks.Init)
	}
	ready, ok := find(lines, initLine.Index, marks.Ready)
	if !ok {
		return Timings{}, fmt.Errorf("no ready line (%v) on the console", marks.Ready)
	}
	kernelStart := kernel.Time
	for _, l := range lines[kernel.Index : ready.Index+1] {
		if up, ok := l.Uptime(); ok {
			if t := l.Time.Add(-up); t.Before(kernelStart) {
				kernelStart = t
			}
		}
	}
	t := Timings{
		ToKernel: kernelStart.Sub(start),
		Total:    ready.Time.Sub(start),
	}
	if up, ok := initLine.Uptime(); ok {
		t.KernelToInit = up
	} else {
		t.KernelToInit = initLine.Time.Sub(kernelStart)
	}
	t.InitToReady = between(initLine, ready)
	return t, nil
}

// between is the time from line a to line b: on the guest clock when both
// carry an uptime, on the host clock otherwise.
func between(a, b Line) time.Duration {
	ua, oka := a.Uptime()
	ub, okb := b.Uptime()
	if oka && okb {
		return ub - ua
	}
	return b.Time.Sub(a.Time)
}

func find(lines []Line, from int, m Matcher) (Line, bool) {
	for _, l := range lines[min(max(from, 0), len(lines)):] {
		if m.MatchString(l.Text) {
			return l, true
		}
	}
	return Line{}, false
}
