package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kill kills every process named name and waits until none of them is
// left but a zombie, so that whoever restarts them can be told apart from
// them.
func kill(name string) error {
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
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s (PID %d) still runs 30 s after SIGKILL", name, pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// named lists the processes whose argv[0] ends in name.
func named(name string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("when listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process that ended since the listing has no command line.
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(b), "\x00")
		if filepath.Base(argv0) == name {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// alive tells whether pid still runs: it exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name, which is in parentheses and
	// may hold anything.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
