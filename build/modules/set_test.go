package modules

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// writeTree writes a fake module directory: every module of fakeDep with
// its path as content, compressed as its suffix says, and the indexes.
func writeTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "6.1.0-99-amd64")
	dep := parseFake(t)
	for file := range dep {
		var buf bytes.Buffer
		content := []byte("module " + file)
		switch filepath.Ext(file) {
		case ".xz":
			w, err := xz.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(content)
			w.Close()
		case ".zst":
			w, _ := zstd.NewWriter(&buf)
			w.Write(content)
			w.Close()
		case ".gz":
			w := gzip.NewWriter(&buf)
			w.Write(content)
			w.Close()
		default:
			buf.Write(content)
		}
		writeFile(t, filepath.Join(dir, file), buf.Bytes())
	}
	writeFile(t, filepath.Join(dir, "modules.dep"), []byte(fakeDep))
	writeFile(t, filepath.Join(dir, "modules.alias"), []byte(`# Aliases extracted from modules themselves.
alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000002v* virtio_blk
alias fs-xfs xfs
alias devname:mapper/control dm_mod
alias pcm:* snd_timer
`))
	writeFile(t, filepath.Join(dir, "modules.softdep"), []byte(`# Soft dependencies extracted from modules themselves.
softdep xfs pre: crypto-crc32c
softdep snd pre: snd-timer
`))
	writeFile(t, filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"))
	return dir
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := writeTree(t)
	s, err := Load(dir, []Prefix{
		{"drivers/virtio/virtio_pci.ko", "bus"},
		{"drivers/block/", "disk"},
		{"drivers/md/dm-crypt", "crypt"},
		{"fs/xfs/", "fs"},
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Release != "6.1.0-99-amd64" {
		t.Errorf("Release = %q, want %q", s.Release, "6.1.0-99-amd64")
	}
	wantModules := []string{
		"kernel/drivers/block/virtio_blk.ko",
		"kernel/drivers/md/dm-crypt.ko",
		"kernel/drivers/md/dm-mod.ko",
		"kernel/drivers/virtio/virtio.ko",
		"kernel/drivers/virtio/virtio_pci.ko",
		"kernel/drivers/virtio/virtio_pci_modern_dev.ko",
		"kernel/drivers/virtio/virtio_ring.ko",
		"kernel/fs/xfs/xfs.ko",
		"kernel/lib/libcrc32c.ko",
	}
	if diff := cmp.Diff(wantModules, s.Modules); diff != "" {
		t.Errorf("Modules (-want +got):\n%s", diff)
	}

	files := map[string]string{}
	var names []string
	for _, f := range s.Files {
		files[f.Name] = string(f.Data)
		names = append(names, f.Name)
	}
	wantNames := append(append([]string{}, wantModules...), "modules.alias", "modules.builtin", "modules.dep", "modules.softdep")
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("file names, in order (-want +got):\n%s", diff)
	}
	if got, want := files["kernel/drivers/md/dm-crypt.ko"], "module kernel/drivers/md/dm-crypt.ko.xz"; got != want {
		t.Errorf("decompressed dm-crypt = %q, want %q", got, want)
	}
	var total int64
	for _, m := range wantModules {
		total += int64(len(files[m]))
	}
	if s.ModuleBytes != total {
		t.Errorf("ModuleBytes = %d, want %d", s.ModuleBytes, total)
	}

	wantDep := `kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/md/dm-crypt.ko: kernel/drivers/md/dm-mod.ko
kernel/drivers/md/dm-mod.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko
kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko
kernel/lib/libcrc32c.ko:
`
	if diff := cmp.Diff(wantDep, files["modules.dep"]); diff != "" {
		t.Errorf("modules.dep (-want +got):\n%s", diff)
	}
	wantAlias := `alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000002v* virtio_blk
alias fs-xfs xfs
alias devname:mapper/control dm_mod
`
	if diff := cmp.Diff(wantAlias, files["modules.alias"]); diff != "" {
		t.Errorf("modules.alias (-want +got):\n%s", diff)
	}
	if got, want := files["modules.softdep"], "softdep xfs pre: crypto-crc32c\n"; got != want {
		t.Errorf("modules.softdep = %q, want %q", got, want)
	}
	if got, want := files["modules.builtin"], "kernel/fs/ext4/ext4.ko\n"; got != want {
		t.Errorf("modules.builtin = %q, want %q", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := writeTree(t)
	if _, err := Load(dir, []Prefix{{"drivers/nothing/", "absent"}}); err == nil {
		t.Error("Load(prefix matching nothing) succeeded, want an error")
	}
	if err := os.Remove(filepath.Join(dir, "kernel/lib/libcrc32c.ko")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, []Prefix{{"fs/xfs/", "fs"}}); err == nil {
		t.Error("Load(dependency file missing) succeeded, want an error")
	}
	if _, err := Load(t.TempDir(), Carried); err == nil {
		t.Error("Load(directory without modules.dep) succeeded, want an error")
	}
}

// TestCarriedIsDocumented keeps the table readable: every entry says why.
func TestCarriedIsDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Carried {
		if p.Path == "" || p.Why == "" {
			t.Errorf("Carried entry %q has no path or no reason", p.Path)
		}
		if seen[p.Path] {
			t.Errorf("Carried lists %q twice", p.Path)
		}
		seen[p.Path] = true
	}
}

// TestEarly: every path of earlyPaths names an entry of Carried, and the
// initramfs carries what it takes to reach the system partition and the
// ESP, and leaves the data partition's modules and Kubernetes' networking
// to the system partition.
func TestEarly(t *testing.T) {
	early := map[string]bool{}
	for _, p := range Early() {
		early[p.Path] = true
	}
	for _, p := range earlyPaths {
		if !early[p] {
			t.Errorf("earlyPaths names %q, which is no entry of Carried", p)
		}
	}
	for _, need := range []string{"drivers/block/virtio_blk.ko", "drivers/nvme/host/nvme.ko", "drivers/ata/ahci.ko",
		"drivers/md/dm-mod.ko", "drivers/md/dm-verity.ko", "fs/erofs/", "crypto/crc32c_generic.ko", "fs/fat/", "fs/efivarfs/"} {
		if !early[need] {
			t.Errorf("the initramfs does not carry %s", need)
		}
	}
	for _, later := range []string{"drivers/md/dm-crypt.ko", "fs/xfs/", "crypto/", "arch/x86/crypto/",
		"net/netfilter/", "net/bridge/", "fs/overlayfs/", "drivers/net/ethernet/intel/igb/"} {
		if early[later] {
			t.Errorf("the initramfs carries %s, which can wait for the system partition", later)
		}
	}
}
