package nodemanagement

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"cairn.dev/cairn/proto/api"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux architecture Cairn runs on.
const clockTicks = 100

// GetResources implements NodeManagement.GetResources from procfs.
func (s *Service) GetResources(context.Context, *api.GetResourcesRequest) (*api.GetResourcesResponse, error) {
	return readResources("/proc")
}

// readResources reads the memory and the processes of the procfs at proc.
// A process that ends while it is read is left out.
func readResources(proc string) (*api.GetResourcesResponse, error) {
	res := &api.GetResourcesResponse{}
	meminfo, err := os.ReadFile(filepath.Join(proc, "meminfo"))
	if err != nil {
		return nil, fmt.Errorf("when reading the memory: %w", err)
	}
	for _, line := range strings.Split(string(meminfo), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "MemTotal":
			res.MemoryTotalBytes = kb * 1024
		case "MemAvailable":
			res.MemoryAvailableBytes = kb * 1024
		}
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("when listing the processes: %w", err)
	}
	page := uint64(os.Getpagesize())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProcess(filepath.Join(proc, e.Name()), page)
		if err != nil || p.ResidentBytes == 0 {
			continue
		}
		p.Pid = int32(pid)
		res.Processes = append(res.Processes, p)
	}
	sort.Slice(res.Processes, func(i, j int) bool {
		return res.Processes[i].ResidentBytes > res.Processes[j].ResidentBytes
	})
	return res, nil
}

// readProcess reads one process's name, CPU time and resident memory.
func readProcess(dir string, page uint64) (*api.GetResourcesResponse_Process, error) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return nil, err
	}
	// "pid (name) state ppid ...": the name may hold spaces and
	// parentheses, so it ends at the last ')'.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return nil, fmt.Errorf("%s/stat is malformed", dir)
	}
	// Fields from the state on: utime and stime are the 12th and 13th.
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return nil, fmt.Errorf("%s/stat is short", dir)
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%s/stat has no CPU times", dir)
	}
	statm, err := os.ReadFile(filepath.Join(dir, "statm"))
	if err != nil {
		return nil, err
	}
	sf := strings.Fields(string(statm))
	if len(sf) < 2 {
		return nil, fmt.Errorf("%s/statm is short", dir)
	}
	resident, err := strconv.ParseUint(sf[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s/statm: %w", dir, err)
	}
	return &api.GetResourcesResponse_Process{
		Name:          string(stat[open+1 : end]),
		ResidentBytes: resident * page,
		CpuTimeMillis: (utime + stime) * 1000 / clockTicks,
	}, nil
}
