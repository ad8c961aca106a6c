// Package procstat reads a node's memory and its processes' resident
// memory and CPU time from procfs, for NodeManagement.GetResources and the
// node's metrics, and tells what each process used between two readings
// (Between), for those who read a node twice.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux architecture Cairn runs on.
const clockTicks = 100

// kernelThreadFlag is PF_KTHREAD, of a process's flags in its stat.
const kernelThreadFlag = 0x00200000

// Memory is the node's memory, from meminfo.
type Memory struct {
	TotalBytes, AvailableBytes uint64
}

// A Process is one process with resident memory.
type Process struct {
	PID           int
	Name          string
	ResidentBytes uint64
	// AnonymousBytes, FileBytes and SharedBytes make up ResidentBytes:
	// memory of the process's own (heap, stacks), pages of files it maps
	// (its program among them), which other processes mapping the same
	// files share and the kernel may drop, and shared memory (tmpfs).
	AnonymousBytes, FileBytes, SharedBytes uint64
	// CPUTime is its user and system CPU time.
	CPUTime time.Duration
	// ParentPID is the process that will reap it when it ends (its
	// parent, or the subreaper it was handed to).
	ParentPID int
	// ChildrenCPUTime is the CPU time of the children it reaped, their
	// own reaped children's included: the programs it ran and waited
	// for, which no reading of living processes shows once they ended.
	ChildrenCPUTime time.Duration
	// KernelThread tells a thread of the kernel's own (a kworker, say),
	// which has no memory of its own.
	KernelThread bool
}

// CPU is the time a node's CPUs spent since it booted, all of them
// together. Unlike the processes' times, it counts the kernel's own
// threads (where dm-verity and dm-crypt hash and decrypt, for one) and
// interrupts.
//
// Busy is what was not idle: the kernel measures its CPUs' idle time
// exactly, but the user and system times of /proc/stat only by sampling
// at its ticks, which miss work that wakes on a timer and sleeps again
// before the next tick, most of what an idle node does. Over 5 minutes
// of an idle emulated controller they came to 55 s, less than its
// processes' own times (60 s, which the scheduler measures exactly),
// where 69 s were not idle.
type CPU struct {
	// Count is the number of CPUs.
	Count int
	// Busy is the time spent running anything: processes in user and
	// kernel mode, the kernel's threads, interrupts.
	Busy time.Duration
	// Idle is the time spent idle, waiting for I/O among it.
	Idle time.Duration
	// Stolen is the time a hypervisor ran something else on the CPUs.
	Stolen time.Duration
}

// ReadCPU reads the node's CPU time from the procfs at proc: its stat
// and its uptime.
func ReadCPU(proc string) (CPU, error) {
	b, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return CPU{}, fmt.Errorf("when reading the CPU time: %w", err)
	}
	var cpu CPU
	var total []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "cpu":
			total = fields[1:]
		case strings.HasPrefix(fields[0], "cpu"):
			cpu.Count++
		}
	}
	// user nice system idle iowait irq softirq steal, in USER_HZ.
	if len(total) < 8 || cpu.Count == 0 {
		return CPU{}, fmt.Errorf("when reading the CPU time: %s/stat has no whole cpu lines", proc)
	}
	var t [8]uint64
	for i := range t {
		if t[i], err = strconv.ParseUint(total[i], 10, 64); err != nil {
			return CPU{}, fmt.Errorf("when reading the CPU time: %s/stat: %w", proc, err)
		}
	}
	ticks := func(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	cpu.Idle = ticks(t[3] + t[4])
	cpu.Stolen = ticks(t[7])
	// "seconds idle", the first of uptime, is the time since boot.
	b, err = os.ReadFile(filepath.Join(proc, "uptime"))
	if err != nil {
		return CPU{}, fmt.Errorf("when reading the uptime: %w", err)
	}
	up, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	secs, err := strconv.ParseFloat(up, 64)
	if err != nil || secs < 0 {
		return CPU{}, fmt.Errorf("when reading the uptime: %s/uptime is malformed: %q", proc, b)
	}
	all := time.Duration(float64(cpu.Count) * secs * float64(time.Second))
	cpu.Busy = max(all-cpu.Idle-cpu.Stolen, 0)
	return cpu, nil
}

// Read reads the memory and the processes of the procfs at proc (/proc on
// a node): every process with resident memory, largest first. A process
// that ends while it is read is left out.
func Read(proc string) (Memory, []Process, error) {
	mem, procs, _, err := ReadWithKernelThreads(proc)
	return mem, procs, err
}

// ReadWithKernelThreads is Read, and from the same pass over the
// processes the kernel's threads that have used CPU time, busiest first:
// they have no resident memory, so Read leaves them out, yet they do a
// node's hashing, decryption and deferred work.
func ReadWithKernelThreads(proc string) (mem Memory, procs, threads []Process, err error) {
	err = readKB(filepath.Join(proc, "meminfo"), map[string]*uint64{
		"MemTotal":     &mem.TotalBytes,
		"MemAvailable": &mem.AvailableBytes,
	})
	if err != nil {
		return Memory{}, nil, nil, fmt.Errorf("when reading the memory: %w", err)
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return Memory{}, nil, nil, fmt.Errorf("when listing the processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProcess(filepath.Join(proc, e.Name()))
		if err != nil {
			continue
		}
		p.PID = pid
		switch {
		case p.ResidentBytes > 0:
			procs = append(procs, p)
		case p.KernelThread && p.CPUTime > 0:
			threads = append(threads, p)
		}
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].ResidentBytes > procs[j].ResidentBytes })
	sort.Slice(threads, func(i, j int) bool { return threads[i].CPUTime > threads[j].CPUTime })
	return mem, procs, threads, nil
}

// ReadProcess reads process pid of the procfs at proc, as Read does.
func ReadProcess(proc string, pid int) (Process, error) {
	p, err := readProcess(filepath.Join(proc, strconv.Itoa(pid)))
	if err != nil {
		return Process{}, fmt.Errorf("when reading process %d: %w", pid, err)
	}
	p.PID = pid
	return p, nil
}

// readProcess reads one process's name, CPU time and resident memory.
func readProcess(dir string) (Process, error) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Process{}, err
	}
	// "pid (name) state ppid ...": the name may hold spaces and
	// parentheses, so it ends at the last ')'.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return Process{}, fmt.Errorf("%s/stat is malformed", dir)
	}
	// Fields from the state on: the parent's PID is the 2nd, the flags
	// the 7th, utime and stime the 12th and 13th, and the reaped
	// children's cutime and cstime the 14th and 15th.
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 15 {
		return Process{}, fmt.Errorf("%s/stat is short", dir)
	}
	ppid, err0 := strconv.Atoi(fields[1])
	flags, err1 := strconv.ParseUint(fields[6], 10, 64)
	if err0 != nil || err1 != nil {
		return Process{}, fmt.Errorf("%s/stat has no parent or flags", dir)
	}
	var ticks [4]uint64 // utime, stime, cutime, cstime
	for i := range ticks {
		// The children's times are signed in the kernel's format,
		// though never below zero.
		if ticks[i], err = strconv.ParseUint(fields[11+i], 10, 64); err != nil {
			return Process{}, fmt.Errorf("%s/stat has no CPU times: %w", dir, err)
		}
	}
	p := Process{
		Name:            string(stat[open+1 : end]),
		CPUTime:         time.Duration(ticks[0]+ticks[1]) * time.Second / clockTicks,
		ParentPID:       ppid,
		ChildrenCPUTime: time.Duration(ticks[2]+ticks[3]) * time.Second / clockTicks,
		KernelThread:    flags&kernelThreadFlag != 0,
	}
	// status has the resident memory by kind: VmRSS is RssAnon, RssFile
	// and RssShmem together.
	err = readKB(filepath.Join(dir, "status"), map[string]*uint64{
		"VmRSS":    &p.ResidentBytes,
		"RssAnon":  &p.AnonymousBytes,
		"RssFile":  &p.FileBytes,
		"RssShmem": &p.SharedBytes,
	})
	if err != nil {
		return Process{}, err
	}
	return p, nil
}

// Proportional returns the proportional set size of process pid of the
// procfs at proc: each of its resident pages counted in part, one share
// for each process that maps it, so that the processes' shares add up to
// the memory they take together. The kernel walks the process's page
// tables for it, which Read leaves to those who ask.
func Proportional(proc string, pid int) (uint64, error) {
	var pss uint64
	file := filepath.Join(proc, strconv.Itoa(pid), "smaps_rollup")
	if err := readKB(file, map[string]*uint64{"Pss": &pss}); err != nil {
		return 0, fmt.Errorf("when reading the proportional set size: %w", err)
	}
	return pss, nil
}

// readKB reads the "Key:  N kB" lines of file (meminfo, status,
// smaps_rollup) into the fields named, in bytes. Other lines are skipped;
// a named field whose value is not a number is an error.
func readKB(file string, fields map[string]*uint64) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, value, ok := strings.Cut(line, ":")
		field := fields[key]
		if !ok || field == nil {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", file, key, err)
		}
		*field = kb * 1024
	}
	return nil
}
