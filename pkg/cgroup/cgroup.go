// Package cgroup prepares cgroup v2 groups of a chosen CPU weight, for a
// supervisor that starts processes in them (supervisor.InCgroup).
//
// Under cgroup v2 the CPU a busy machine has is shared between the
// children of a group in proportion to their cpu.weight (1 to 10000,
// default 100), and between the threads within one child equally. A
// process placed in a group of its own therefore keeps its weight's share
// however many threads its siblings run.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultWeight is cgroup v2's CPU weight of a group nobody weighed.
const DefaultWeight = 100

// Prepare makes dir, a group below a cgroup v2 hierarchy, ready to hold
// processes of CPU weight weight: the CPU controller enabled for the
// children of dir's parent, dir made, its cpu.weight set. What is already
// so stays.
func Prepare(dir string, weight int) error {
	if weight < 1 || weight > 10000 {
		return fmt.Errorf("when preparing cgroup %s: CPU weight %d is not within 1 to 10000", dir, weight)
	}
	parent := filepath.Dir(dir)
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("when preparing cgroup %s: %s is not a cgroup v2 hierarchy", dir, parent)
	}
	control := filepath.Join(parent, "cgroup.subtree_control")
	enabled, err := os.ReadFile(control)
	if err != nil {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if !slices.Contains(strings.Fields(string(enabled)), "cpu") {
		if err := os.WriteFile(control, []byte("+cpu"), 0); err != nil {
			return fmt.Errorf("when preparing cgroup %s: enabling the CPU controller in %s: %w", dir, parent, err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("when preparing cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.Itoa(weight)), 0); err != nil {
		return fmt.Errorf("when preparing cgroup %s: setting its CPU weight: %w", dir, err)
	}
	return nil
}
