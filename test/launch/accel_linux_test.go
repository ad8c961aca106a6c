package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCPUHasVirtualization(t *testing.T) {
	for _, tc := range []struct {
		cpuinfo string
		want    bool
	}{
		{"processor\t: 0\nflags\t\t: fpu vme de pse vmx sse2\n", true},
		{"flags\t\t: fpu svm lm\nflags\t\t: fpu svm lm\n", true},
		{"processor\t: 0\nflags\t\t: fpu vme de pse aes avx\n", false},
		// A flag name inside another word, or vmx outside the flags line,
		// is not the extension.
		{"flags\t\t: vmxnet svmlike\nmodel name\t: vmx svm\n", false},
		{"vmx flags\t: ept vpid\n", false},
		{"", false},
	} {
		if got := cpuHasVirtualization([]byte(tc.cpuinfo)); got != tc.want {
			t.Errorf("cpuHasVirtualization(%q) = %v, want %v", tc.cpuinfo, got, tc.want)
		}
	}
}

func TestChooseAccel(t *testing.T) {
	works := func() error { return nil }
	noFlags := func() error { return fmt.Errorf("/dev/kvm opens, but %w", errNoVirtualization) }
	noDevice := func() error { return fmt.Errorf("when opening /dev/kvm: %w", os.ErrNotExist) }
	for _, tc := range []struct {
		name    string
		accel   Accel
		env     string
		probe   func() error
		wantKVM bool
		// wantFallback: the fallback line is printed.
		wantFallback bool
		wantErr      bool
	}{
		{name: "auto, KVM works", probe: works, wantKVM: true},
		{name: "auto, no CPU flags", probe: noFlags, wantFallback: true},
		{name: "auto, no device", probe: noDevice, wantFallback: true},
		{name: "env auto", env: "auto", probe: noFlags, wantFallback: true},
		{name: "env tcg where KVM works", env: "tcg", probe: works},
		{name: "env TCG, any case", env: " TCG ", probe: works},
		{name: "env kvm without CPU flags", env: "kvm", probe: noFlags, wantKVM: true},
		{name: "env kvm without device", env: "kvm", probe: noDevice, wantErr: true},
		{name: "env garbage", env: "hvf", probe: works, wantErr: true},
		{name: "option tcg wins over env", accel: AccelTCG, env: "kvm", probe: works},
		{name: "option kvm wins over env", accel: AccelKVM, env: "tcg", probe: works, wantKVM: true},
		{name: "option kvm without device", accel: AccelKVM, probe: noDevice, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := chooseAccel(tc.accel, tc.env, tc.probe)
			if (err != nil) != tc.wantErr {
				t.Fatalf("chooseAccel(%v, %q) error = %v, want error %v", tc.accel, tc.env, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if c.KVM != tc.wantKVM || c.Fallback != tc.wantFallback {
				t.Errorf("chooseAccel(%v, %q) = %+v, want KVM %v, fallback %v", tc.accel, tc.env, c, tc.wantKVM, tc.wantFallback)
			}
			if c.Reason == "" {
				t.Errorf("chooseAccel(%v, %q) gives no reason", tc.accel, tc.env)
			}
		})
	}
}

// TestProbeKVM runs the probe against files that are not KVM: a device
// that does not exist, and a regular file, which opens but refuses the
// ioctl. On this machine's real /dev/kvm it must agree with the CPU flags.
func TestProbeKVM(t *testing.T) {
	dir := t.TempDir()
	cpuinfo := filepath.Join(dir, "cpuinfo")
	if err := os.WriteFile(cpuinfo, []byte("flags\t: fpu vmx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probeKVM(filepath.Join(dir, "missing"), cpuinfo); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("probeKVM(missing device) = %v, want not exist", err)
	}
	notKVM := filepath.Join(dir, "not-kvm")
	if err := os.WriteFile(notKVM, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probeKVM(notKVM, cpuinfo); err == nil || !strings.Contains(err.Error(), "does not answer as KVM") {
		t.Errorf("probeKVM(regular file) = %v, want it not to answer as KVM", err)
	}

	host, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	err = probeKVM("/dev/kvm", "/proc/cpuinfo")
	if err == nil && !cpuHasVirtualization(host) {
		t.Errorf("probeKVM on this host = nil, but its CPU has neither vmx nor svm")
	}
	t.Logf("this host: %v", err)
}
