package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/procstat"
)

// commLen is the most a process's name (its comm, which procstat reads)
// holds: the kernel cuts longer names to it.
const commLen = 15

// kill kills every process named name and waits until none of them is
// left but a zombie, so that whoever restarts them can be told apart from
// them.
func kill(name string) error {
	if len(name) > commLen {
		return fmt.Errorf("no process can be named %s: the kernel keeps at most %d characters of a name", name, commLen)
	}
	pids, err := named(name)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("no process is named %s", name)
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("when killing %s (PID %d): %w", name, pid, err)
		}
		fmt.Println(pid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := named(name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(pids, func(pid int) bool { return slices.Contains(now, pid) })
		if i < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (PID %d) still runs 30 s after SIGKILL", name, pids[i])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// named lists the processes named name. A zombie has no resident memory,
// so procstat leaves it out.
func named(name string) ([]int, error) {
	_, procs, err := procstat.Read("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		if p.Name == name {
			pids = append(pids, p.PID)
		}
	}
	return pids, nil
}
