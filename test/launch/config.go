package launch

import (
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strings"
)

// Defaults used where a Config or an option leaves a setting empty.
const (
	DefaultQEMU     = "qemu-system-x86_64"
	DefaultQEMUImg  = "qemu-img"
	DefaultSWTPM    = "swtpm"
	DefaultOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	DefaultOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// SecureBootOVMFCode is Debian's OVMF built to enforce Secure Boot
	// (it needs SMM), and SecureBootOVMFVars its variables with Secure
	// Boot on and Debian's snakeoil certificate (in the ovmf package) as
	// the one key and signer it trusts: what a development build signs
	// its UKI with.
	SecureBootOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	SecureBootOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	DefaultMemoryMiB   = 1024
	DefaultCPUs        = 1
)

// Config is what every node needs: a name and a disk, and its size.
type Config struct {
	// Name identifies the node in errors, file names and its MAC address.
	// Empty means "node".
	Name string
	// Image is the raw disk image to boot. The node writes to a qcow2
	// overlay backed by it, DiskSize large (made with qemu-img; where
	// qemu-img is missing, qemu keeps a temporary snapshot of its own, as
	// large as the image); the image itself is never modified, unless
	// WithWritableImage says so. Empty is allowed only with WithDirectBoot, for a node
	// without a disk.
	Image string
	// MemoryMiB is the guest's memory. Zero means DefaultMemoryMiB.
	MemoryMiB int
	// CPUs is the number of virtual CPUs. Zero means DefaultCPUs.
	CPUs int
}

// DirectBoot is a kernel that qemu loads itself, skipping the firmware and
// the unified kernel image on the disk: the fast path for tests that need a
// different kernel command line.
type DirectBoot struct {
	// Kernel is the path of the kernel (bzImage).
	Kernel string
	// Initrd is the path of the initramfs; empty for none.
	Initrd string
	// Cmdline is the kernel command line.
	Cmdline string
}

// FWCfgFile is a file handed to the guest through qemu's fw_cfg device,
// visible in sysfs under /sys/firmware/qemu_fw_cfg/by_name/<Name>/raw.
type FWCfgFile struct {
	// Name is the fw_cfg name; qemu requires it to start with "opt/".
	Name string
	// Data is the file's content.
	Data []byte
}

// Network attaches a node's network card to something on the host. NoNetwork
// and UserNetwork are the ones that exist so far.
type Network interface {
	// netArgs returns the qemu arguments for the node's network card.
	netArgs(name string) []string
}

// NoNetwork gives the node no network card at all.
type NoNetwork struct{}

func (NoNetwork) netArgs(string) []string { return nil }

// UserNetwork gives the node a virtio network card on qemu's user-mode
// network: a private NAT with its own DHCP server, reachable from the host
// only through Forwards.
type UserNetwork struct {
	// MAC is the card's address. Empty means one derived from the node's
	// name, so that nodes of a cluster differ and a node keeps its own.
	MAC string
	// Forwards are host ports forwarded to the guest.
	Forwards []PortForward
}

// PortForward forwards a host TCP port to a guest TCP port.
type PortForward struct {
	// HostAddr is the host address to listen on. Empty means 127.0.0.1.
	HostAddr string
	// HostPort is the host port to listen on.
	HostPort int
	// GuestPort is the port on the node that connections go to.
	GuestPort int
}

func (u UserNetwork) netArgs(name string) []string {
	netdev := "user,id=net0"
	for _, f := range u.Forwards {
		addr := f.HostAddr
		if addr == "" {
			addr = "127.0.0.1"
		}
		netdev += fmt.Sprintf(",hostfwd=tcp:%s:%d-:%d", addr, f.HostPort, f.GuestPort)
	}
	mac := u.MAC
	if mac == "" {
		mac = MACFor(name)
	}
	return []string{
		"-netdev", netdev,
		"-device", "virtio-net-pci,netdev=net0,mac=" + mac,
	}
}

// MACFor derives a stable, locally administered MAC address in qemu's
// 52:54:00 range from a node name.
func MACFor(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	s := h.Sum32()
	mac := net.HardwareAddr{0x52, 0x54, 0x00, byte(s >> 16), byte(s >> 8), byte(s)}
	return mac.String()
}

// Accel chooses qemu's accelerator.
type Accel int

const (
	// AccelAuto follows CAIRN_ACCEL (AccelEnv) when it is set, and
	// otherwise uses KVM only where it works: the device opens and
	// answers, and the CPU has vmx or svm. Else TCG, said once.
	AccelAuto Accel = iota
	// AccelKVM requires KVM: a device that does not work is an error.
	AccelKVM
	// AccelTCG uses software emulation even where KVM exists.
	AccelTCG
)

// options are the optional settings of a node, set by Options.
type options struct {
	qemu, qemuImg, swtpm string
	ovmfCode, ovmfVars   string
	secureBoot           bool
	accel                Accel
	cpu                  string
	tpm                  bool
	tpmState             string
	varStore             string
	parameters           []byte
	fwcfg                []FWCfgFile
	network              Network
	direct               *DirectBoot
	noReboot             bool
	consoleCopy          io.Writer
	consoleFile          string
	extraArgs            []string
	writableImage        bool
	hotplugPort          bool
	usbPort              bool

	// kvm is accel as Launch resolved it.
	kvm bool
}

func defaultOptions() options {
	return options{
		qemu:     DefaultQEMU,
		qemuImg:  DefaultQEMUImg,
		swtpm:    DefaultSWTPM,
		ovmfCode: DefaultOVMFCode,
		ovmfVars: DefaultOVMFVars,
		network:  UserNetwork{},
	}
}

// Option changes an optional setting of a node.
type Option func(*options)

// WithOVMF uses other firmware files than Debian's OVMF_CODE_4M/VARS_4M.
// The variable store is a template: the node writes only to its own copy
// (see WithVarStore).
func WithOVMF(code, vars string) Option {
	return func(o *options) { o.ovmfCode, o.ovmfVars = code, vars }
}

// WithSecureBoot boots the node through firmware that enforces Secure
// Boot (SecureBootOVMFCode and SecureBootOVMFVars, unless WithOVMF names
// others after it), on a machine with SMM and its firmware's flash
// writable only from SMM, as Secure Boot firmware needs: it starts only
// an EFI binary signed by a key its variables trust.
func WithSecureBoot() Option {
	return func(o *options) {
		o.secureBoot, o.ovmfCode, o.ovmfVars = true, SecureBootOVMFCode, SecureBootOVMFVars
	}
}

// WithoutSecureBoot undoes WithSecureBoot given before it: Debian's
// OVMF_CODE_4M/VARS_4M, which do not enforce Secure Boot, on a machine
// without SMM.
func WithoutSecureBoot() Option {
	return func(o *options) {
		o.secureBoot, o.ovmfCode, o.ovmfVars = false, DefaultOVMFCode, DefaultOVMFVars
	}
}

// WithTPM gives the node a TPM 2.0, emulated by a swtpm process of its own.
func WithTPM() Option { return func(o *options) { o.tpm = true } }

// WithTPMState gives the node a TPM 2.0 whose state lives in dir instead of
// the node's temporary state directory, so that it outlives the node: a
// node launched again with the same dir (and the same disk) finds the TPM
// that sealed its secrets. dir is created if missing; only one node at a
// time may use it.
func WithTPMState(dir string) Option {
	return func(o *options) { o.tpm, o.tpmState = true, dir }
}

// WithVarStore keeps the node's firmware variable store at path instead
// of a fresh copy in its temporary state directory, so that it outlives
// the node: the boot entries, BootOrder and BootNext it wrote are there
// at its next launch, as in a machine's flash. path is copied from the
// template (Debian's OVMF_VARS_4M, or WithOVMF's) only when it does not
// exist; its directory is created if missing. Only one node at a time
// may use it. A direct boot has no firmware and leaves it alone.
func WithVarStore(path string) Option {
	return func(o *options) { o.varStore = path }
}

// WithParameters hands the node its node parameters (a serialized
// cairn.api.NodeParameters) through fw_cfg, as parameters.FWCfgName.
func WithParameters(pb []byte) Option {
	return func(o *options) { o.parameters = pb }
}

// WithFWCfgFile hands the node one more fw_cfg file.
func WithFWCfgFile(name string, data []byte) Option {
	return func(o *options) { o.fwcfg = append(o.fwcfg, FWCfgFile{Name: name, Data: data}) }
}

// WithNetwork chooses the node's network; the default is UserNetwork{}.
func WithNetwork(n Network) Option { return func(o *options) { o.network = n } }

// WithDirectBoot boots a kernel given to qemu instead of going through OVMF
// and the disk's unified kernel image.
func WithDirectBoot(d DirectBoot) Option {
	return func(o *options) { o.direct = &d }
}

// WithNoReboot makes a guest reboot end qemu instead of restarting the
// machine, so that a test can see that the node chose to reboot.
func WithNoReboot() Option { return func(o *options) { o.noReboot = true } }

// WithConsoleCopy also copies the raw serial console to w (os.Stdout for a
// person watching). Errors writing to w are ignored.
func WithConsoleCopy(w io.Writer) Option {
	return func(o *options) { o.consoleCopy = w }
}

// WithConsoleFile writes the raw serial console to path, which outlives the
// node, instead of a file in the node's temporary state directory.
func WithConsoleFile(path string) Option {
	return func(o *options) { o.consoleFile = path }
}

// WithWritableImage lets the node write to Config.Image itself instead of
// an overlay, for tests that boot one disk several times. Give it a copy
// of the built image, never the image: a copy smaller than DiskSize is
// grown to it (sparsely), as a machine's disk is larger than the image.
func WithWritableImage() Option { return func(o *options) { o.writableImage = true } }

// WithHotplugPort gives the machine an empty PCI Express slot, into
// which Node.AttachDisk plugs a disk while the node runs.
func WithHotplugPort() Option { return func(o *options) { o.hotplugPort = true } }

// WithUSBPort gives the machine a USB 3 controller (qemu-xhci), into
// which Node.AttachStick plugs a USB stick while the node runs.
func WithUSBPort() Option { return func(o *options) { o.usbPort = true } }

// WithAccel chooses the accelerator; the default is AccelAuto.
func WithAccel(a Accel) Option { return func(o *options) { o.accel = a } }

// WithCPU gives the node qemu's CPU model cpu, with features if any
// ("qemu64" for a CPU without AES-NI, "qemu64,+aes"), instead of the
// accelerator's best: the host's CPU under KVM, "max" under TCG.
func WithCPU(cpu string) Option { return func(o *options) { o.cpu = cpu } }

// WithBinaries uses other qemu-system-x86_64, qemu-img and swtpm binaries;
// empty arguments keep the defaults.
func WithBinaries(qemu, qemuImg, swtpm string) Option {
	return func(o *options) {
		if qemu != "" {
			o.qemu = qemu
		}
		if qemuImg != "" {
			o.qemuImg = qemuImg
		}
		if swtpm != "" {
			o.swtpm = swtpm
		}
	}
}

// WithExtraArgs appends raw arguments to qemu's command line.
func WithExtraArgs(args ...string) Option {
	return func(o *options) { o.extraArgs = append(o.extraArgs, args...) }
}

// checkFWCfgName rejects names that qemu would refuse, with a clearer error
// than qemu's and before anything is started.
func checkFWCfgName(name string) error {
	// qemu keeps fw_cfg names in 56 bytes, including the final NUL.
	const maxLen = 55
	switch {
	case !strings.HasPrefix(name, "opt/"):
		return fmt.Errorf("fw_cfg name %q does not start with opt/", name)
	case len(name) > maxLen:
		return fmt.Errorf("fw_cfg name %q is longer than %d bytes", name, maxLen)
	case strings.ContainsAny(name, ",\x00"):
		return fmt.Errorf("fw_cfg name %q contains a comma or NUL", name)
	}
	return nil
}
