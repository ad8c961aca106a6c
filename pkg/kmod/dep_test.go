package kmod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDeps(t *testing.T) {
	in := `kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_pci.ko.xz: kernel/drivers/virtio/virtio_pci_modern_dev.ko.xz kernel/drivers/virtio/virtio.ko
kernel/drivers/hid/hid-generic.ko.zst: kernel/drivers/hid/hid.ko.zst
/abs/extra/foo.ko:
kernel/drivers/virtio/virtio.ko: kernel/duplicate.ko
`
	got, err := ParseDeps(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseDeps: %v", err)
	}
	want := map[string]*Module{
		"virtio":      {Name: "virtio", Path: "kernel/drivers/virtio/virtio.ko"},
		"virtio_pci":  {Name: "virtio_pci", Path: "kernel/drivers/virtio/virtio_pci.ko.xz", Deps: []string{"virtio_pci_modern_dev", "virtio"}},
		"hid_generic": {Name: "hid_generic", Path: "kernel/drivers/hid/hid-generic.ko.zst", Deps: []string{"hid"}},
		"foo":         {Name: "foo", Path: "/abs/extra/foo.ko"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseDeps mismatch (-want +got):\n%s", diff)
	}
}

func TestParseDepsRejects(t *testing.T) {
	for _, in := range []string{
		"no colon here\n",
		": kernel/a.ko\n",
		"two words.ko: x.ko\n",
	} {
		if _, err := ParseDeps(strings.NewReader(in)); err == nil {
			t.Errorf("ParseDeps(%q) = nil error, want one", in)
		}
	}
}

func TestParseBuiltin(t *testing.T) {
	in := "kernel/drivers/tty/serial/8250/8250.ko\nkernel/fs/ext4/ext4.ko\n\nkernel/drivers/input/serio/i8042.ko\n"
	got, err := ParseBuiltin(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseBuiltin: %v", err)
	}
	want := map[string]bool{"8250": true, "ext4": true, "i8042": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseBuiltin mismatch (-want +got):\n%s", diff)
	}
}

func TestModuleName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kernel/drivers/hid/hid-generic.ko.xz", "hid_generic"},
		{"kernel/drivers/virtio/virtio_pci.ko", "virtio_pci"},
		{"button", "button"},
		{"snd-hda-intel", "snd_hda_intel"},
		{"a.ko.zst", "a"},
		{"", ""},
	} {
		if got := moduleName(tc.in); got != tc.want {
			t.Errorf("moduleName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzParseDeps(f *testing.F) {
	f.Add("kernel/a.ko: kernel/b.ko kernel/c.ko.xz\nkernel/b.ko:\n# x\n")
	f.Add("/abs.ko:\n")
	f.Fuzz(func(t *testing.T, in string) {
		modules, err := ParseDeps(strings.NewReader(in))
		if err != nil {
			return
		}
		for name, m := range modules {
			if name == "" || name != m.Name {
				t.Errorf("ParseDeps(%q): module %q filed as %q", in, m.Name, name)
			}
			for _, d := range m.Deps {
				if d == "" || strings.ContainsAny(d, " \t\n") {
					t.Errorf("ParseDeps(%q): module %q has dependency %q", in, name, d)
				}
			}
		}
	})
}
