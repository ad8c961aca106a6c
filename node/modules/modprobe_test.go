package modules

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/kmod"
)

func TestParseModprobeArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want      []string
		wantQuiet bool
	}{
		// What the kernel's call_modprobe passes.
		{[]string{"-q", "--", "crypto-ecb"}, []string{"crypto-ecb"}, true},
		{[]string{"-q", "--", "crypto-xts(aes)-all"}, []string{"crypto-xts(aes)-all"}, true},
		// iptables puts -q last; kube-proxy asks without it.
		{[]string{"xt_conntrack", "-q"}, []string{"xt_conntrack"}, true},
		{[]string{"--", "ip_vs"}, []string{"ip_vs"}, false},
		{[]string{"-qb", "--all", "ip_vs", "ip_vs_rr"}, []string{"ip_vs", "ip_vs_rr"}, true},
		{[]string{"--quiet", "--use-blacklist", "-s", "fs-xfs"}, []string{"fs-xfs"}, true},
	} {
		got, err := parseModprobeArgs(tc.args)
		if err != nil {
			t.Errorf("parseModprobeArgs(%q) = %v", tc.args, err)
			continue
		}
		if !slices.Equal(got.names, tc.want) || got.quiet != tc.wantQuiet {
			t.Errorf("parseModprobeArgs(%q) = names %q, quiet %v; want %q, %v", tc.args, got.names, got.quiet, tc.want, tc.wantQuiet)
		}
	}
}

func TestParseModprobeArgsRejects(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"-q", "--"},
		{"-r", "ecb"},           // removal is not served
		{"--show-depends", "x"}, // nor anything but loading
		{"ecb", "param=1"},      // module parameters
		{"-q", "--", ""},
		{"-q", "--", "../ecb"},
		{"-q", "--", "-x"},
		{"-"},
	} {
		if got, err := parseModprobeArgs(args); err == nil {
			t.Errorf("parseModprobeArgs(%q) = %+v, want an error", args, got)
		}
	}
}

// FuzzParseModprobeArgs checks that whatever a caller passes, a name that
// is accepted is one the module index can look up.
func FuzzParseModprobeArgs(f *testing.F) {
	f.Add("-q\x00--\x00crypto-ecb")
	f.Add("-qa\x00x\x00--\x00y")
	f.Fuzz(func(t *testing.T, in string) {
		a, err := parseModprobeArgs(strings.Split(in, "\x00"))
		if err != nil {
			return
		}
		if len(a.names) == 0 {
			t.Fatalf("parseModprobeArgs(%q) accepted no names", in)
		}
		for _, n := range a.names {
			if n == "" || n[0] == '-' || strings.ContainsAny(n, "/ \t\n") {
				t.Errorf("parseModprobeArgs(%q) accepted the name %q", in, n)
			}
		}
	})
}

// A module directory as the initramfs carries it, cut down: modules that
// the kernel asks for by name or by alias, a dependency chain, an alias
// with several modules (one for hardware the machine lacks) and a
// wildcard alias.
const (
	testModulesDep = `kernel/crypto/ecb.ko:
kernel/crypto/xts.ko:
kernel/crypto/cryptd.ko:
kernel/crypto/crypto_simd.ko: kernel/crypto/cryptd.ko
kernel/arch/x86/crypto/aesni-intel.ko: kernel/crypto/crypto_simd.ko kernel/crypto/cryptd.ko
kernel/drivers/crypto/padlock-aes.ko:
kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko
kernel/lib/libcrc32c.ko:
kernel/drivers/md/dm-mod.ko:
kernel/drivers/md/dm-crypt.ko: kernel/drivers/md/dm-mod.ko
kernel/drivers/block/loop.ko:
kernel/drivers/watchdog/watchdog.ko:
kernel/drivers/watchdog/i6300esb.ko: kernel/drivers/watchdog/watchdog.ko
`
	testModulesAlias = `# Aliases extracted from modules themselves.
alias crypto-ecb ecb
alias crypto-xts xts
alias crypto-aes aesni_intel
alias crypto-aes padlock_aes
alias cpu:type:x86,ven*fam*mod*:feature:*0099* aesni_intel
alias fs-xfs xfs
alias char-major-10-236 dm_mod
alias block-major-7-* loop
`
	testModulesBuiltin = "kernel/crypto/aes_generic.ko\nkernel/crypto/cbc.ko\n"
)

// moduleKernel stands in for finit_module(2): each module file holds its
// name, and loading records it.
type moduleKernel struct {
	loaded []string
	// absent are modules whose hardware the machine lacks.
	absent []string
	// broken are modules the kernel refuses.
	broken []string
	// params are the parameters each loaded module was given.
	params map[string]string
}

func (k *moduleKernel) load(f *os.File, params string, _ int) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	name := string(b)
	switch {
	case slices.Contains(k.absent, name):
		return unix.ENODEV
	case slices.Contains(k.broken, name):
		return unix.ENOEXEC
	case slices.Contains(k.loaded, name):
		return unix.EEXIST
	}
	k.loaded = append(k.loaded, name)
	if k.params == nil {
		k.params = make(map[string]string)
	}
	k.params[name] = params
	return nil
}

// writeModules writes the test module directory and a /proc/modules that
// lists present, and returns their paths.
func writeModules(t *testing.T, present ...string) (dir, proc string) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{
		"modules.dep":     testModulesDep,
		"modules.alias":   testModulesAlias,
		"modules.builtin": testModulesBuiltin,
	}
	for _, line := range strings.Split(strings.TrimSpace(testModulesDep), "\n") {
		p, _, _ := strings.Cut(line, ":")
		files[p] = strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".ko"), "-", "_")
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var procLines string
	for _, m := range present {
		procLines += m + " 16384 0 - Live 0x0000000000000000\n"
	}
	proc = filepath.Join(t.TempDir(), "modules")
	if err := os.WriteFile(proc, []byte(procLines), 0o444); err != nil {
		t.Fatal(err)
	}
	return dir, proc
}

func TestServeRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		names   []string
		present []string // listed in /proc/modules
		before  []string // loaded, but not listed: the kernel says EEXIST
		absent  []string // hardware missing: the kernel says ENODEV
		broken  []string // the kernel says ENOEXEC
		// wantLoaded is what the run loads, in order.
		wantLoaded []string
		wantOK     bool
		wantLevel  int
		wantLine   string
	}{{
		name:       "alias of the kernel's crypto request",
		names:      []string{"crypto-ecb"},
		wantLoaded: []string{"ecb"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded ecb (for crypto-ecb) in 0.25s",
	}, {
		name:       "module name, with dependencies first",
		names:      []string{"dm-crypt"},
		wantLoaded: []string{"dm_mod", "dm_crypt"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded dm_mod dm_crypt (for dm-crypt) in 0.25s",
	}, {
		name:       "filesystem, a dependency listed as loaded",
		names:      []string{"fs-xfs"},
		present:    []string{"libcrc32c"},
		wantLoaded: []string{"xfs"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded xfs (for fs-xfs) in 0.25s",
	}, {
		name:       "wildcard alias",
		names:      []string{"block-major-7-0"},
		wantLoaded: []string{"loop"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded loop (for block-major-7-0) in 0.25s",
	}, {
		name:       "underscores for dashes, as modprobe reads aliases",
		names:      []string{"crypto_ecb"},
		wantLoaded: []string{"ecb"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded ecb (for crypto_ecb) in 0.25s",
	}, {
		name:       "one module of an alias lacks its hardware",
		names:      []string{"crypto-aes"},
		absent:     []string{"padlock_aes"},
		wantLoaded: []string{"cryptd", "crypto_simd", "aesni_intel"},
		wantOK:     true,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded cryptd crypto_simd aesni_intel (for crypto-aes) in 0.25s",
	}, {
		name:       "every module of an alias lacks its hardware",
		names:      []string{"crypto-aes"},
		absent:     []string{"aesni_intel", "padlock_aes"},
		wantLoaded: []string{"cryptd", "crypto_simd"}, // aesni_intel's dependencies
		wantOK:     false,
		wantLevel:  kmsgInfo,
		wantLine: "loaded cryptd crypto_simd (for crypto-aes) in 0.25s; when loading the modules for crypto-aes: " +
			"module aesni_intel: finit_module: no such device; module padlock_aes: finit_module: no such device",
	}, {
		name:       "a module that does not load",
		names:      []string{"fs-xfs"},
		broken:     []string{"xfs"},
		wantLoaded: []string{"libcrc32c"},
		wantOK:     false,
		wantLevel:  kmsgWarning,
		wantLine:   "loaded libcrc32c (for fs-xfs) in 0.25s; when loading the modules for fs-xfs: module xfs: finit_module: exec format error",
	}, {
		name:      "no device, and nothing loaded",
		names:     []string{"crypto-ecb"},
		absent:    []string{"ecb"},
		wantOK:    false,
		wantLevel: kmsgDebug,
		wantLine:  "when loading the modules for crypto-ecb: module ecb: finit_module: no such device",
	}, {
		name:      "built in",
		names:     []string{"cbc"},
		wantOK:    true,
		wantLevel: kmsgDebug,
		wantLine:  "cbc: built in or loaded already",
	}, {
		name:      "loaded behind the list's back",
		names:     []string{"crypto-xts"},
		before:    []string{"xts"},
		wantOK:    true,
		wantLevel: kmsgDebug,
		wantLine:  "crypto-xts: built in or loaded already",
	}, {
		name:      "nothing provides it",
		names:     []string{"crypto-xts(aes)-all"},
		wantOK:    false,
		wantLevel: kmsgDebug,
		wantLine:  "no module for crypto-xts(aes)-all",
	}, {
		name:       "several names, one unknown",
		names:      []string{"crypto-xts", "nope"},
		wantLoaded: []string{"xts"},
		wantOK:     false,
		wantLevel:  kmsgInfo,
		wantLine:   "loaded xts (for crypto-xts nope) in 0.25s; no module for nope",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, proc := writeModules(t, tc.present...)
			k := &moduleKernel{loaded: slices.Clone(tc.before), absent: tc.absent, broken: tc.broken}
			l, err := openLoader(dir, proc, kmod.WithLoadFunc(k.load))
			if err != nil {
				t.Fatalf("openLoader: %v", err)
			}
			r := serveRequests(l, tc.names)
			if diff := cmp.Diff(tc.wantLoaded, r.loaded); diff != "" {
				t.Errorf("serveRequests(%q) loaded (-want +got):\n%s", tc.names, diff)
			}
			if r.ok() != tc.wantOK {
				t.Errorf("serveRequests(%q).ok() = %v, want %v", tc.names, r.ok(), tc.wantOK)
			}
			level, line := r.line(250 * time.Millisecond)
			if level != tc.wantLevel || line != tc.wantLine {
				t.Errorf("serveRequests(%q).line() = %d, %q; want %d, %q", tc.names, level, line, tc.wantLevel, tc.wantLine)
			}
		})
	}
}

// A node's loader gives the watchdog core the parameter that keeps a
// device running through a reboot, whoever asks for the driver.
func TestOpenLoaderParameters(t *testing.T) {
	dir, proc := writeModules(t)
	k := &moduleKernel{}
	l, err := openLoader(dir, proc, kmod.WithLoadFunc(k.load))
	if err != nil {
		t.Fatalf("openLoader: %v", err)
	}
	if err := l.Load("i6300esb"); err != nil {
		t.Fatalf("Load(i6300esb) = %v", err)
	}
	want := map[string]string{"watchdog": "stop_on_reboot=0", "i6300esb": ""}
	if diff := cmp.Diff(want, k.params); diff != "" {
		t.Errorf("parameters given to the kernel (-want +got):\n%s", diff)
	}
}

func TestOpenLoaderErrors(t *testing.T) {
	if _, err := openLoader(t.TempDir(), "/nonexistent"); err == nil {
		t.Errorf("openLoader(empty directory) = nil error, want one")
	}
	// Without /proc/modules the loader still works.
	dir, _ := writeModules(t)
	k := &moduleKernel{}
	l, err := openLoader(dir, filepath.Join(t.TempDir(), "missing"), kmod.WithLoadFunc(k.load))
	if err != nil {
		t.Fatalf("openLoader(no /proc/modules) = %v", err)
	}
	if err := l.Request("fs-xfs"); err != nil {
		t.Errorf("Request(fs-xfs) = %v", err)
	}
	if err := l.Request("nope"); !errors.Is(err, kmod.ErrNotFound) {
		t.Errorf("Request(nope) = %v, want %v", err, kmod.ErrNotFound)
	}
}

func TestServeModuleRequests(t *testing.T) {
	dir := t.TempDir()
	sysctl := filepath.Join(dir, "modprobe")
	if err := os.WriteFile(sysctl, []byte("/sbin/modprobe-of-the-kernel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "sbin", "modprobe")
	// Twice: the core may start again in the same boot, and finds its
	// link there.
	for i := 0; i < 2; i++ {
		if err := serveModuleRequests(link, sysctl); err != nil {
			t.Fatalf("serveModuleRequests, call %d: %v", i+1, err)
		}
		if target, err := os.Readlink(link); err != nil || target != nodeBinary {
			t.Errorf("the link points to %q (%v), want %q", target, err, nodeBinary)
		}
		if got, _ := os.ReadFile(sysctl); string(got) != link+"\n" {
			t.Errorf("the sysctl holds %q, want %q", got, link+"\n")
		}
	}

	// Something else in the link's place is not taken for it.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := serveModuleRequests(other, sysctl); err == nil {
		t.Errorf("serveModuleRequests(a file in the link's place) = nil, want an error")
	}
	if err := serveModuleRequests(filepath.Join(dir, "sbin", "m2"), filepath.Join(dir, "no", "such", "dir")); err == nil {
		t.Errorf("serveModuleRequests(missing sysctl directory) = nil, want an error")
	}
}

func TestStatStartTime(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want uint64
		ok   bool
	}{
		{"412 (modprobe) S 2 0 0 0 -1 4194560 600 0 0 0 1 2 0 0 20 0 3 0 1234 1000000 500 18446744073709551615", 1234, true},
		// The command may hold spaces and parentheses.
		{"7 (a) b (c) R 2 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0", 99, true},
		{"7 (short) R 2 0", 0, false},
		{"no parenthesis", 0, false},
		{"7 (x) R 2 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 notanumber 0", 0, false},
	} {
		got, ok := statStartTime([]byte(tc.stat))
		if got != tc.want || ok != tc.ok {
			t.Errorf("statStartTime(%q) = %d, %v; want %d, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRunningFor(t *testing.T) {
	// This test process started before the test did: the kernel's start
	// time is no later than now, and not far in the past.
	d := runningFor(time.Now())
	if d < 0 || d > time.Hour {
		t.Errorf("runningFor() = %v, want between 0 and an hour", d)
	}
}

// TestCPUModulesFor: of the modules a request for an algorithm leads to,
// the CPU's are those its modalias asks for; a CPU without the feature,
// or without a readable modalias, has none.
func TestCPUModulesFor(t *testing.T) {
	dir, proc := writeModules(t)
	l, err := openLoader(dir, proc)
	if err != nil {
		t.Fatalf("openLoader: %v", err)
	}
	modalias := func(features string) string {
		p := filepath.Join(t.TempDir(), "modalias")
		if err := os.WriteFile(p, []byte("cpu:type:x86,ven0000fam0006mod003F:feature:"+features+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withAES := modalias(",0000,0001,0081,0099,00A0")
	for _, c := range []struct {
		modalias, alg string
		want          []string
	}{
		{withAES, "aes", []string{"aesni_intel"}},
		{withAES, "xts", nil}, // a module of its own, not the CPU's
		{modalias(",0000,0001,0081"), "aes", nil},
		{filepath.Join(t.TempDir(), "missing"), "aes", nil},
	} {
		if got := cpuModulesFor(l, c.modalias, c.alg); !slices.Equal(got, c.want) {
			t.Errorf("cpuModulesFor(%s, %s) = %q, want %q", filepath.Base(c.modalias), c.alg, got, c.want)
		}
	}
}
