package modules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/logtree"
)

// TestLoadSystemWithoutModules: a system partition that has no module
// directory for the kernel is said once and leaves the node with the
// initramfs's modules, while one that cannot be looked at fails the step,
// to be retried, without that line and without binding anything.
func TestLoadSystemWithoutModules(t *testing.T) {
	log := logtree.New().LeveledFor("test")
	root := t.TempDir()
	var lines []string
	printf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	missing := &Steps{initramfs: t.TempDir(), system: filepath.Join(root, "lib/modules/none"), printf: printf}
	if err := missing.LoadSystem(context.Background(), log); err != nil {
		t.Fatalf("LoadSystem without a module directory: %v, want no error", err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "the system partition has no modules") {
		t.Errorf("LoadSystem without a module directory said %q, want one line about it", lines)
	}
	if !missing.placed {
		t.Error("LoadSystem without a module directory will look again on the next run")
	}

	// A path through a regular file fails with ENOTDIR, which stands in
	// for the EIO of a block dm-verity refuses.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lines = nil
	unreadable := &Steps{initramfs: t.TempDir(), system: filepath.Join(file, "modules"), printf: printf}
	err := unreadable.LoadSystem(context.Background(), log)
	if err == nil || !strings.Contains(err.Error(), "system partition's modules") {
		t.Errorf("LoadSystem with an unreadable module directory: %v, want an error about it", err)
	}
	if len(lines) != 0 || unreadable.placed {
		t.Errorf("LoadSystem with an unreadable module directory said %q and placed=%v, want neither", lines, unreadable.placed)
	}
}
