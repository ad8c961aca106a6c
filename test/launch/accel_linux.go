package launch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// AccelEnv names the environment variable that overrides the accelerator
// of every node a process launches: kvm, tcg, or auto (the default).
const AccelEnv = "CAIRN_ACCEL"

// AccelChoice is the accelerator nodes of this process use, and why.
type AccelChoice struct {
	// KVM is true for hardware virtualization, false for TCG (software
	// emulation).
	KVM bool
	// Reason says in a few words what decided it.
	Reason string
	// Fallback is true when nothing asked for either and KVM did not
	// work: the case a person should be told about.
	Fallback bool
}

// String describes the choice in one line, for logs and reports.
func (c AccelChoice) String() string {
	if c.KVM {
		return "KVM (" + c.Reason + ")"
	}
	return "TCG software emulation (" + c.Reason + ")"
}

// kvmAPIVersion is the only KVM API version Linux has ever had; a device
// that answers anything else is not KVM as qemu knows it.
const kvmAPIVersion = 12

// kvmGetAPIVersion is the KVM_GET_API_VERSION ioctl, _IO(0xAE, 0x00).
const kvmGetAPIVersion = 0xAE00

// probeKVM says why KVM cannot run a guest here, or nil when it can: the
// device must open for reading and writing and answer as KVM, and the CPU
// must expose its virtualization extensions. The device alone proves
// nothing: nested sandboxes hand out a /dev/kvm that opens, answers and
// even creates VMs, on a CPU without vmx or svm, where qemu then aborts
// ("failed to set MSR") or hangs.
func probeKVM(device, cpuinfo string) error {
	f, err := os.OpenFile(device, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("when opening %s: %w", device, err)
	}
	defer f.Close()
	v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("%s does not answer as KVM: %w", device, err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("%s speaks KVM API version %d, not %d", device, v, kvmAPIVersion)
	}
	info, err := os.ReadFile(cpuinfo)
	if err != nil {
		return fmt.Errorf("when reading the CPU flags: %w", err)
	}
	if !cpuHasVirtualization(info) {
		return fmt.Errorf("%s opens, but %w in %s", device, errNoVirtualization, cpuinfo)
	}
	return nil
}

// errNoVirtualization is probeKVM's answer for a working device on a CPU
// without virtualization extensions. Only there may an explicit choice
// of KVM overrule the probe: CPU flags can be hidden from a guest whose
// hypervisor still nests.
var errNoVirtualization = errors.New("the CPU flags have neither vmx nor svm")

// cpuHasVirtualization reports whether a /proc/cpuinfo lists Intel's (vmx)
// or AMD's (svm) virtualization extensions among the CPU flags.
func cpuHasVirtualization(cpuinfo []byte) bool {
	for line := range bytes.Lines(cpuinfo) {
		key, value, ok := strings.Cut(string(line), ":")
		if !ok || strings.TrimSpace(key) != "flags" {
			continue
		}
		for _, flag := range strings.Fields(value) {
			if flag == "vmx" || flag == "svm" {
				return true
			}
		}
	}
	return false
}

// chooseAccel decides between KVM and TCG for an option's Accel, the value
// of AccelEnv and the outcome of the KVM probe. An explicit choice, in the
// option or the environment, wins over the probe; forcing KVM where the
// device cannot even be opened is an error rather than a silent TCG.
func chooseAccel(a Accel, env string, probe func() error) (AccelChoice, error) {
	why := "asked for"
	if a == AccelAuto {
		switch strings.ToLower(strings.TrimSpace(env)) {
		case "", "auto":
		case "kvm":
			a, why = AccelKVM, AccelEnv+"=kvm"
		case "tcg":
			a, why = AccelTCG, AccelEnv+"=tcg"
		default:
			return AccelChoice{}, fmt.Errorf("%s=%q: want kvm, tcg or auto", AccelEnv, env)
		}
	}
	switch a {
	case AccelTCG:
		return AccelChoice{Reason: why}, nil
	case AccelKVM:
		if err := probe(); err != nil && !errors.Is(err, errNoVirtualization) {
			return AccelChoice{}, fmt.Errorf("KVM %s but not usable: %w", why, err)
		}
		return AccelChoice{KVM: true, Reason: why}, nil
	}
	if err := probe(); err != nil {
		return AccelChoice{Reason: "KVM unusable: " + err.Error(), Fallback: true}, nil
	}
	return AccelChoice{KVM: true, Reason: "/dev/kvm works and the CPU has vmx or svm"}, nil
}

// The probe runs once per process, and the fallback is said once: a
// cluster of nodes needs the answer many times and the line only once.
var (
	probeOnce   sync.Once
	probeResult error
	saidOnce    sync.Once
)

func probeKVMOnce() error {
	probeOnce.Do(func() { probeResult = probeKVM("/dev/kvm", "/proc/cpuinfo") })
	return probeResult
}

// ChooseAccel returns the accelerator that nodes launched with a (the
// default is AccelAuto) use in this process, honouring AccelEnv.
func ChooseAccel(a Accel) (AccelChoice, error) {
	return chooseAccel(a, os.Getenv(AccelEnv), probeKVMOnce)
}

// resolveAccel is ChooseAccel for Launch: the first time a node falls back
// to TCG because KVM does not work, it prints one line saying why to w.
func resolveAccel(a Accel, w io.Writer) (AccelChoice, error) {
	c, err := ChooseAccel(a)
	if err == nil && c.Fallback {
		saidOnce.Do(func() { fmt.Fprintf(w, "launch: using %s; set %s=kvm to force KVM\n", c, AccelEnv) })
	}
	return c, err
}
