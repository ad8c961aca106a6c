package launch

import (
	"strconv"
	"strings"
)

// plan is a node with every host resource in place: the paths of the files
// and sockets that Launch prepared. Turning it into qemu's command line is
// a pure function, so that it can be tested without running anything.
type plan struct {
	name      string
	memoryMiB int
	cpus      int
	kvm       bool
	// cpu is qemu's CPU model, with features if any ("qemu64",
	// "qemu64,+aes"); empty means the accelerator's best: host under
	// KVM, max under TCG.
	cpu string
	// disk is the file qemu opens as the node's disk, used as diskMode
	// says; empty for a node without a disk.
	disk     string
	diskMode diskMode
	// ovmfCode and ovmfVars are the firmware and the node's own copy of the
	// variable store; unused with direct boot.
	ovmfCode, ovmfVars string
	// secureBoot gives the machine SMM and makes the firmware's flash
	// writable only from it, as Secure Boot firmware needs.
	secureBoot bool
	direct     *DirectBoot
	// tpmSocket is swtpm's control socket; empty for no TPM.
	tpmSocket string
	fwcfg     []fwcfgPath
	network   Network
	qmpSocket string
	noReboot  bool
	// hotplugPort adds an empty PCI Express root port, hotplugPortID.
	hotplugPort bool
	// usbPort adds a USB 3 controller, usbControllerID.
	usbPort   bool
	extraArgs []string
}

// hotplugPortID names the root port of plan.hotplugPort, the bus of a
// disk Node.AttachDisk plugs in.
const hotplugPortID = "hotplug0"

// usbControllerID names the controller of plan.usbPort, on whose bus
// Node.AttachStick plugs a stick.
const usbControllerID = "usb0"

// diskMode says how qemu uses the node's disk file.
type diskMode int

const (
	// diskOverlay: the file is the node's qcow2 overlay over the image.
	// Its writes are thrown away with it, so flushes need not reach the
	// host's disk.
	diskOverlay diskMode = iota
	// diskSnapshot: the file is the raw image, which qemu opens read-only
	// behind a temporary overlay of its own (snapshot=on): the way out
	// when qemu-img is missing.
	diskSnapshot
	// diskWritable: the file is a raw image that the node writes to, for
	// a disk that lives on after the node (WithWritableImage).
	diskWritable
)

func (m diskMode) driveOptions() string {
	switch m {
	case diskSnapshot:
		return "format=raw,snapshot=on,cache=unsafe"
	case diskWritable:
		return "format=raw,cache=writeback"
	default:
		return "format=qcow2,cache=unsafe"
	}
}

// fwcfgPath is an fw_cfg file written to disk for qemu to read.
type fwcfgPath struct {
	name, path string
}

// args returns qemu's arguments, without the binary's name. The serial
// console is qemu's standard output; the monitor is QMP on a socket.
func (p plan) args() []string {
	a := []string{
		"-name", opt(p.name),
		"-nodefaults", "-no-user-config",
		"-display", "none",
	}
	if p.secureBoot && p.direct == nil {
		a = append(a, "-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on")
	} else {
		a = append(a, "-machine", "q35")
	}
	accel, cpu := "tcg", "max"
	if p.kvm {
		accel, cpu = "kvm", "host"
	}
	if p.cpu != "" {
		// Not escaped: commas separate the model's features.
		cpu = p.cpu
	}
	a = append(a,
		"-accel", accel, "-cpu", cpu,
		"-m", strconv.Itoa(p.memoryMiB),
		"-smp", strconv.Itoa(p.cpus),
	)
	a = append(a, p.bootArgs()...)
	if p.disk != "" {
		a = append(a,
			"-drive", "if=none,id=disk0,"+p.diskMode.driveOptions()+",file="+opt(p.disk),
			"-device", "virtio-blk-pci,drive=disk0,bootindex=1",
		)
	}
	a = append(a,
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-pci,rng=rng0",
		// A hardware watchdog, as a real board has one: PID 1 feeds it,
		// and a node that hangs, its kernel included, is reset.
		"-device", "i6300esb", "-action", "watchdog=reset",
	)
	if p.network != nil {
		a = append(a, p.network.netArgs(p.name)...)
	}
	if p.hotplugPort {
		a = append(a, "-device", "pcie-root-port,id="+hotplugPortID+",chassis=1")
	}
	if p.usbPort {
		a = append(a, "-device", "qemu-xhci,id="+usbControllerID)
	}
	if p.tpmSocket != "" {
		a = append(a,
			"-chardev", "socket,id=chrtpm,path="+opt(p.tpmSocket),
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
			"-device", "tpm-tis,tpmdev=tpm0",
		)
	}
	for _, f := range p.fwcfg {
		a = append(a, "-fw_cfg", "name="+opt(f.name)+",file="+opt(f.path))
	}
	a = append(a,
		"-chardev", "stdio,id=console,signal=off",
		"-serial", "chardev:console",
		"-qmp", "unix:"+opt(p.qmpSocket)+",server=on,wait=off",
	)
	if p.noReboot {
		a = append(a, "-no-reboot")
	}
	return append(a, p.extraArgs...)
}

// bootArgs returns the firmware or the kernel that qemu starts.
func (p plan) bootArgs() []string {
	if d := p.direct; d != nil {
		// qemu's default BIOS loads the kernel itself: no OVMF.
		a := []string{"-kernel", d.Kernel}
		if d.Initrd != "" {
			a = append(a, "-initrd", d.Initrd)
		}
		return append(a, "-append", d.Cmdline)
	}
	return []string{
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + opt(p.ovmfCode),
		"-drive", "if=pflash,format=raw,unit=1,file=" + opt(p.ovmfVars),
	}
}

// opt escapes a value inside a qemu option list, where a comma separates
// options and two commas stand for one.
func opt(v string) string {
	return strings.ReplaceAll(v, ",", ",,")
}
