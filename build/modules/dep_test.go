package modules

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeDep is a small modules.dep with the shapes the real one has: shared
// dependencies, chains, modules without dependencies, a compressed module,
// and depmod's habit of listing transitive dependencies too.
const fakeDep = `kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko
kernel/lib/libcrc32c.ko:
kernel/drivers/md/dm-crypt.ko.xz: kernel/drivers/md/dm-mod.ko
kernel/drivers/md/dm-mod.ko:
kernel/sound/core/snd.ko: kernel/sound/core/snd-timer.ko
kernel/sound/core/snd-timer.ko:
`

func parseFake(t *testing.T) Dep {
	t.Helper()
	dep, err := ParseDep(strings.NewReader(fakeDep))
	if err != nil {
		t.Fatalf("ParseDep(fakeDep): %v", err)
	}
	return dep
}

func TestParseDep(t *testing.T) {
	dep := parseFake(t)
	if len(dep) != 14 {
		t.Errorf("ParseDep(fakeDep) has %d modules, want 14", len(dep))
	}
	got := dep["kernel/drivers/net/virtio_net.ko"]
	want := []string{
		"kernel/drivers/net/net_failover.ko", "kernel/net/core/failover.ko",
		"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("virtio_net dependencies (-want +got):\n%s", diff)
	}
	if d, ok := dep["kernel/net/core/failover.ko"]; !ok || len(d) != 0 {
		t.Errorf("failover.ko = %q, %v; want no dependencies, present", d, ok)
	}
}

func TestParseDepRejects(t *testing.T) {
	for _, in := range []string{
		"kernel/a.ko kernel/b.ko\n",             // no colon
		": kernel/b.ko\n",                       // no module
		"kernel/a b.ko: kernel/b.ko\n",          // space in the module path
		"kernel/a.ko:\nkernel/a.ko: kernel/b\n", // listed twice
		strings.Repeat("x", 2*1024*1024) + ":\n",
	} {
		if dep, err := ParseDep(strings.NewReader(in)); err == nil {
			t.Errorf("ParseDep(%.40q) = %v, want an error", in, dep)
		}
	}
	dep, err := ParseDep(strings.NewReader("# comment\n\n  kernel/a.ko:  \n"))
	if err != nil || len(dep) != 1 {
		t.Errorf("ParseDep(comment, blank, a.ko) = %v, %v; want a.ko only", dep, err)
	}
}

func TestSelectAndClosure(t *testing.T) {
	dep := parseFake(t)
	for _, tc := range []struct {
		name      string
		prefixes  []string
		wantRoots []string
		wantAll   []string
	}{{
		name:      "folder prefix takes the whole folder",
		prefixes:  []string{"drivers/virtio/"},
		wantRoots: []string{"kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_pci.ko", "kernel/drivers/virtio/virtio_pci_modern_dev.ko", "kernel/drivers/virtio/virtio_ring.ko"},
		wantAll:   []string{"kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_pci.ko", "kernel/drivers/virtio/virtio_pci_modern_dev.ko", "kernel/drivers/virtio/virtio_ring.ko"},
	}, {
		name:      "dependencies outside the prefix are added",
		prefixes:  []string{"drivers/net/virtio_net.ko"},
		wantRoots: []string{"kernel/drivers/net/virtio_net.ko"},
		wantAll:   []string{"kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko", "kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_ring.ko", "kernel/net/core/failover.ko"},
	}, {
		name:      "shared dependencies appear once",
		prefixes:  []string{"drivers/block/", "drivers/net/virtio_net.ko", "fs/xfs/"},
		wantRoots: []string{"kernel/drivers/block/virtio_blk.ko", "kernel/drivers/net/virtio_net.ko", "kernel/fs/xfs/xfs.ko"},
		wantAll:   []string{"kernel/drivers/block/virtio_blk.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko", "kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_ring.ko", "kernel/fs/xfs/xfs.ko", "kernel/lib/libcrc32c.ko", "kernel/net/core/failover.ko"},
	}, {
		name:      "compressed module by its stored name",
		prefixes:  []string{"drivers/md/dm-crypt"},
		wantRoots: []string{"kernel/drivers/md/dm-crypt.ko.xz"},
		wantAll:   []string{"kernel/drivers/md/dm-crypt.ko.xz", "kernel/drivers/md/dm-mod.ko"},
	}, {
		name:      "overlapping prefixes",
		prefixes:  []string{"sound/", "sound/core/snd.ko"},
		wantRoots: []string{"kernel/sound/core/snd-timer.ko", "kernel/sound/core/snd.ko"},
		wantAll:   []string{"kernel/sound/core/snd-timer.ko", "kernel/sound/core/snd.ko"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var prefixes []Prefix
			for _, p := range tc.prefixes {
				prefixes = append(prefixes, Prefix{Path: p, Why: "test"})
			}
			roots, err := Select(dep, prefixes)
			if err != nil {
				t.Fatalf("Select(%q): %v", tc.prefixes, err)
			}
			if diff := cmp.Diff(tc.wantRoots, roots); diff != "" {
				t.Errorf("Select(%q) (-want +got):\n%s", tc.prefixes, diff)
			}
			all, err := Closure(dep, roots)
			if err != nil {
				t.Fatalf("Closure(%q): %v", roots, err)
			}
			if diff := cmp.Diff(tc.wantAll, all); diff != "" {
				t.Errorf("Closure(%q) (-want +got):\n%s", roots, diff)
			}
		})
	}
}

func TestSelectUnmatchedPrefix(t *testing.T) {
	dep := parseFake(t)
	_, err := Select(dep, []Prefix{{"drivers/virtio/", "ok"}, {"drivers/gone.ko", "renamed upstream"}})
	if err == nil || !strings.Contains(err.Error(), "drivers/gone.ko") {
		t.Errorf("Select(unmatched prefix) error = %v, want one naming drivers/gone.ko", err)
	}
}

func TestClosureErrors(t *testing.T) {
	dep := Dep{
		"kernel/a.ko": {"kernel/missing.ko"},
		"kernel/b.ko": {"kernel/c.ko"},
		"kernel/c.ko": {"kernel/b.ko"},
	}
	if got, err := Closure(dep, []string{"kernel/a.ko"}); err == nil {
		t.Errorf("Closure(a needs a missing module) = %q, want an error", got)
	}
	if got, err := Closure(dep, []string{"kernel/nope.ko"}); err == nil {
		t.Errorf("Closure(unknown root) = %q, want an error", got)
	}
	// A cycle cannot come from depmod, but the walk must end on one.
	got, err := Closure(dep, []string{"kernel/b.ko"})
	if err != nil {
		t.Fatalf("Closure(cycle): %v", err)
	}
	if diff := cmp.Diff([]string{"kernel/b.ko", "kernel/c.ko"}, got); diff != "" {
		t.Errorf("Closure(cycle) (-want +got):\n%s", diff)
	}
}

func TestNameAndUncompressed(t *testing.T) {
	for _, tc := range []struct{ in, name, uncompressed string }{
		{"kernel/drivers/char/hw_random/virtio-rng.ko", "virtio_rng", "kernel/drivers/char/hw_random/virtio-rng.ko"},
		{"kernel/drivers/md/dm-crypt.ko.xz", "dm_crypt", "kernel/drivers/md/dm-crypt.ko"},
		{"kernel/fs/xfs/xfs.ko.zst", "xfs", "kernel/fs/xfs/xfs.ko"},
		{"kernel/fs/fat/vfat.ko.gz", "vfat", "kernel/fs/fat/vfat.ko"},
	} {
		if got := Name(tc.in); got != tc.name {
			t.Errorf("Name(%q) = %q, want %q", tc.in, got, tc.name)
		}
		if got := Uncompressed(tc.in); got != tc.uncompressed {
			t.Errorf("Uncompressed(%q) = %q, want %q", tc.in, got, tc.uncompressed)
		}
	}
}

func TestFormat(t *testing.T) {
	dep := parseFake(t)
	got := string(dep.Format([]string{"kernel/drivers/md/dm-mod.ko", "kernel/drivers/md/dm-crypt.ko.xz"}, Uncompressed))
	want := "kernel/drivers/md/dm-crypt.ko: kernel/drivers/md/dm-mod.ko\nkernel/drivers/md/dm-mod.ko:\n"
	if got != want {
		t.Errorf("Format(dm) = %q, want %q", got, want)
	}
}
