package modules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/pkg/kmod"
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

// TestLoadNamed: Load loads the named modules after their dependencies,
// skips names no module has, built-in modules and those loaded already,
// and takes a module the kernel refuses as no error: the program that
// needs it asks again, and learns why.
func TestLoadNamed(t *testing.T) {
	dir, proc := writeModules(t, "libcrc32c")
	k := &moduleKernel{broken: []string{"ecb"}}
	var mu sync.Mutex
	load := func(f *os.File, params string, flags int) error {
		mu.Lock()
		defer mu.Unlock()
		return k.load(f, params, flags)
	}
	n, err := loadFrom(context.Background(), dir, proc, []string{"dm_crypt", "xfs", "ecb", "no_such_module", "cbc"}, kmod.WithLoadFunc(load))
	if err != nil {
		t.Fatalf("loadFrom: %v", err)
	}
	got := slices.Clone(k.loaded)
	if i, j := slices.Index(got, "dm_mod"), slices.Index(got, "dm_crypt"); i < 0 || j < i {
		t.Errorf("loaded %v: want dm_mod before dm_crypt", got)
	}
	slices.Sort(got)
	if want := []string{"dm_crypt", "dm_mod", "xfs"}; !slices.Equal(got, want) || n != len(want) {
		t.Errorf("loaded %v, counted %d; want %v", got, n, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k = &moduleKernel{}
	if _, err := loadFrom(ctx, dir, proc, []string{"xfs"}, kmod.WithLoadFunc(load)); err == nil || len(k.loaded) != 0 {
		t.Errorf("a cancelled load: error %v, loaded %v; want an error and nothing loaded", err, k.loaded)
	}
	if _, err := loadFrom(context.Background(), filepath.Join(dir, "missing"), proc, []string{"xfs"}); err == nil {
		t.Error("a module directory without an index loaded without error")
	}
}
