package kmod

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// fakeKernel stands in for finit_module(2). Each fake module file holds
// the module's name; the kernel "loads" it by recording that name.
type fakeKernel struct {
	mu     sync.Mutex
	loaded []string
	flags  map[string]int
	params map[string]string
	// fail makes loading a module return an error.
	fail map[string]error
	// onLoad runs after a module loaded, e.g. to add devices to sysfs.
	onLoad func(name string)
}

func (k *fakeKernel) load(f *os.File, params string, flags int) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	name := string(b)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.fail[name]; err != nil {
		return err
	}
	if slices.Contains(k.loaded, name) {
		return unix.EEXIST
	}
	k.loaded = append(k.loaded, name)
	if k.flags == nil {
		k.flags = make(map[string]int)
	}
	k.flags[name] = flags
	if k.params == nil {
		k.params = make(map[string]string)
	}
	k.params[name] = params
	if k.onLoad != nil {
		k.onLoad(name)
	}
	return nil
}

// fakeLog records what a Loader logs; a goroutine that logs and the test
// that reads may share it through has.
type fakeLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *fakeLog) Infof(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, "I "+fmt.Sprintf(format, args...))
}

func (l *fakeLog) Warningf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, "W "+fmt.Sprintf(format, args...))
}

// has reports whether a line logged so far contains part.
func (l *fakeLog) has(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(s string) bool { return strings.Contains(s, part) })
}

// writeModuleDir makes a module directory with the given modules.dep,
// modules.alias and modules.builtin, and a file for every module in
// modules.dep.
func writeModuleDir(t *testing.T, dep, alias, builtin string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"modules.dep": dep, "modules.alias": alias, "modules.builtin": builtin} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mods, err := ParseDeps(strings.NewReader(dep))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		p := filepath.Join(dir, m.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(m.Name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const testDep = `kernel/virtio.ko:
kernel/virtio_ring.ko:
kernel/virtio_pci_modern_dev.ko:
kernel/virtio_pci.ko: kernel/virtio_pci_modern_dev.ko kernel/virtio_ring.ko kernel/virtio.ko
kernel/net_failover.ko: kernel/failover.ko
kernel/failover.ko:
kernel/virtio_net.ko.xz: kernel/net_failover.ko kernel/virtio_ring.ko kernel/virtio.ko kernel/failover.ko
kernel/button.ko:
kernel/evdev.ko:
kernel/aesni_intel.ko:
kernel/broken.ko:
kernel/needs_broken.ko: kernel/broken.ko
kernel/cycle_a.ko: kernel/cycle_b.ko
kernel/cycle_b.ko: kernel/cycle_a.ko
`

const testAlias = `alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias acpi*:LNXPWRBN:* button
alias cpu:type:x86,ven*fam*mod*:feature:*0099* aesni_intel
alias input:b*v*p*e*-e*k*r*a*m*l*s*f*w* evdev
alias pci:v00001234d*sv*sd*bc*sc*i* needs_broken
`

const testBuiltin = "kernel/drivers/tty/serial/8250.ko\nkernel/fs/ext4.ko\n"

func newTestLoader(t *testing.T, k *fakeKernel, log *fakeLog, opts ...LoaderOption) *Loader {
	t.Helper()
	idx, err := Open(writeModuleDir(t, testDep, testAlias, testBuiltin))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return NewLoader(idx, append([]LoaderOption{WithLoadFunc(k.load), WithLogger(log)}, opts...)...)
}

func TestLoadGivesParameters(t *testing.T) {
	k := &fakeKernel{}
	log := &fakeLog{}
	l := newTestLoader(t, k, log, WithParams(map[string]string{"failover": "a=1 b=0", "button": "x=2"}))
	if err := l.Load("virtio_net"); err != nil {
		t.Fatalf("Load(virtio_net) = %v, want nil", err)
	}
	want := map[string]string{"failover": "a=1 b=0", "net_failover": "", "virtio": "", "virtio_ring": "", "virtio_net": ""}
	if diff := cmp.Diff(want, k.params); diff != "" {
		t.Errorf("parameters given to the kernel (-want +got):\n%s", diff)
	}
	if !log.has("loaded module failover (a=1 b=0)") {
		t.Errorf("log %q does not say which parameters failover was given", log.lines)
	}
}

func TestLoadResolvesDependencies(t *testing.T) {
	k := &fakeKernel{}
	log := &fakeLog{}
	l := newTestLoader(t, k, log)
	for _, m := range []string{"virtio_net", "virtio_pci", "ext4", "virtio-pci"} {
		if err := l.Load(m); err != nil {
			t.Errorf("Load(%q) = %v, want nil", m, err)
		}
	}
	want := []string{"failover", "net_failover", "virtio_ring", "virtio", "virtio_net", "virtio_pci_modern_dev", "virtio_pci"}
	if diff := cmp.Diff(want, k.loaded); diff != "" {
		t.Errorf("kernel loaded (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, l.Loaded()); diff != "" {
		t.Errorf("Loaded() (-want +got):\n%s", diff)
	}
	if got, want := k.flags["virtio_net"], unix.MODULE_INIT_COMPRESSED_FILE; got != want {
		t.Errorf("flags for virtio_net.ko.xz = %#x, want %#x", got, want)
	}
	if got := k.flags["virtio"]; got != 0 {
		t.Errorf("flags for virtio.ko = %#x, want 0", got)
	}
	if !slices.Contains(log.lines, "I loaded module virtio_pci") {
		t.Errorf("log = %q, want it to include %q", log.lines, "I loaded module virtio_pci")
	}
}

func TestLoadSkipsPresent(t *testing.T) {
	k := &fakeKernel{loaded: []string{"virtio_ring"}} // loaded behind our back: EEXIST
	l := newTestLoader(t, k, &fakeLog{}, WithPresent("virtio", "virtio-pci-modern-dev"))
	if err := l.Load("virtio_pci"); err != nil {
		t.Fatalf("Load(virtio_pci) = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"virtio_pci"}, l.Loaded()); diff != "" {
		t.Errorf("Loaded() (-want +got):\n%s", diff)
	}
}

func TestLoadFailures(t *testing.T) {
	errBad := errors.New("exec format error")
	k := &fakeKernel{fail: map[string]error{"broken": errBad}}
	log := &fakeLog{}
	l := newTestLoader(t, k, log)

	if err := l.Load("needs_broken"); !errors.Is(err, errBad) {
		t.Errorf("Load(needs_broken) = %v, want %v", err, errBad)
	}
	// A second attempt fails the same way without asking the kernel again.
	if err := l.Load("broken"); !errors.Is(err, errBad) {
		t.Errorf("Load(broken) again = %v, want %v", err, errBad)
	}
	if err := l.Load("nonexistent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load(nonexistent) = %v, want %v", err, ErrNotFound)
	}
	if err := l.Load("cycle_a"); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("Load(cycle_a) = %v, want a dependency cycle error", err)
	}
	if len(k.loaded) != 0 {
		t.Errorf("kernel loaded %q, want nothing", k.loaded)
	}
	var warnings int
	for _, line := range log.lines {
		if strings.HasPrefix(line, "W loading module broken failed") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("log = %q, want one warning for module broken", log.lines)
	}
}

func TestHas(t *testing.T) {
	l := newTestLoader(t, &fakeKernel{}, &fakeLog{})
	for _, tc := range []struct {
		name string
		want bool
	}{{"button", true}, {"ext4", true}, {"qemu_fw_cfg", false}} {
		if got := l.Has(tc.name); got != tc.want {
			t.Errorf("Has(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReadProcModules(t *testing.T) {
	in := "virtio_net 65536 0 - Live 0x0000000000000000\nnet_failover 20480 1 virtio_net, Live 0x0000000000000000\n"
	got, err := ReadProcModules(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ReadProcModules: %v", err)
	}
	if diff := cmp.Diff([]string{"virtio_net", "net_failover"}, got); diff != "" {
		t.Errorf("ReadProcModules (-want +got):\n%s", diff)
	}
}
