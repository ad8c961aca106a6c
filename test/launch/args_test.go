package launch

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/parameters"
)

// basePlan is the smallest node: OVMF, a disk, TCG, no network.
func basePlan() plan {
	return plan{
		name:      "n1",
		memoryMiB: 1024,
		cpus:      1,
		disk:      "/s/disk.qcow2",
		ovmfCode:  "/fw/CODE.fd",
		ovmfVars:  "/s/VARS.fd",
		network:   NoNetwork{},
		qmpSocket: "/s/qmp.sock",
	}
}

// Pieces of the command line that most cases share.
var (
	argsHead = []string{
		"-name", "n1", "-nodefaults", "-no-user-config", "-display", "none",
		"-machine", "q35",
	}
	argsTCG  = []string{"-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "1"}
	argsOVMF = []string{
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
		"-drive", "if=pflash,format=raw,unit=1,file=/s/VARS.fd",
	}
	argsDisk = []string{
		"-drive", "if=none,id=disk0,format=qcow2,cache=unsafe,file=/s/disk.qcow2",
		"-device", "virtio-blk-pci,drive=disk0,bootindex=1",
	}
	argsBoard = []string{
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-pci,rng=rng0",
		"-device", "i6300esb", "-action", "watchdog=reset",
	}
	argsTail = []string{
		"-chardev", "stdio,id=console,signal=off",
		"-serial", "chardev:console",
		"-qmp", "unix:/s/qmp.sock,server=on,wait=off",
	}
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*plan)
		want   [][]string
	}{
		{
			name:   "base",
			change: func(*plan) {},
			want:   [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard, argsTail},
		},
		{
			name:   "hotplug port",
			change: func(p *plan) { p.hotplugPort = true },
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{"-device", "pcie-root-port,id=hotplug0,chassis=1"}, argsTail},
		},
		{
			name:   "usb port",
			change: func(p *plan) { p.usbPort = true },
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{"-device", "qemu-xhci,id=usb0"}, argsTail},
		},
		{
			name: "kvm, memory and cpus",
			change: func(p *plan) {
				p.kvm, p.memoryMiB, p.cpus = true, 4096, 4
			},
			want: [][]string{argsHead,
				{"-accel", "kvm", "-cpu", "host", "-m", "4096", "-smp", "4"},
				argsOVMF, argsDisk, argsBoard, argsTail},
		},
		{
			name:   "cpu model under tcg",
			change: func(p *plan) { p.cpu = "qemu64" },
			want: [][]string{argsHead,
				{"-accel", "tcg", "-cpu", "qemu64", "-m", "1024", "-smp", "1"},
				argsOVMF, argsDisk, argsBoard, argsTail},
		},
		{
			name:   "cpu model with features under kvm",
			change: func(p *plan) { p.kvm, p.cpu = true, "qemu64,+aes" },
			want: [][]string{argsHead,
				{"-accel", "kvm", "-cpu", "qemu64,+aes", "-m", "1024", "-smp", "1"},
				argsOVMF, argsDisk, argsBoard, argsTail},
		},
		{
			name:   "secure boot: smm, the firmware's flash secure",
			change: func(p *plan) { p.secureBoot = true },
			want: [][]string{
				{"-name", "n1", "-nodefaults", "-no-user-config", "-display", "none",
					"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on"},
				argsTCG, argsOVMF, argsDisk, argsBoard, argsTail},
		},
		{
			name:   "tpm",
			change: func(p *plan) { p.tpmSocket = "/s/swtpm/ctrl.sock" },
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{
					"-chardev", "socket,id=chrtpm,path=/s/swtpm/ctrl.sock",
					"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
					"-device", "tpm-tis,tpmdev=tpm0",
				},
				argsTail},
		},
		{
			name: "fw_cfg files",
			change: func(p *plan) {
				p.fwcfg = []fwcfgPath{
					{name: parameters.FWCfgName, path: "/s/fwcfg-0"},
					{name: "opt/dev.cairn/other", path: "/s/fwcfg-1"},
				}
			},
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{
					"-fw_cfg", "name=" + parameters.FWCfgName + ",file=/s/fwcfg-0",
					"-fw_cfg", "name=opt/dev.cairn/other,file=/s/fwcfg-1",
				},
				argsTail},
		},
		{
			name:   "user network, derived MAC",
			change: func(p *plan) { p.network = UserNetwork{} },
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{
					"-netdev", "user,id=net0",
					"-device", "virtio-net-pci,netdev=net0,mac=" + MACFor("n1"),
				},
				argsTail},
		},
		{
			name: "user network with forwards",
			change: func(p *plan) {
				p.network = UserNetwork{
					MAC: "52:54:00:00:00:01",
					Forwards: []PortForward{
						{HostPort: 17833, GuestPort: 7833},
						{HostAddr: "127.0.0.2", HostPort: 17835, GuestPort: 7835},
					},
				}
			},
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard,
				{
					"-netdev", "user,id=net0,hostfwd=tcp:127.0.0.1:17833-:7833,hostfwd=tcp:127.0.0.2:17835-:7835",
					"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01",
				},
				argsTail},
		},
		{
			name:   "variable store kept across launches",
			change: func(p *plan) { p.ovmfVars = "/c/node0.vars.fd" },
			want: [][]string{argsHead, argsTCG,
				{
					"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
					"-drive", "if=pflash,format=raw,unit=1,file=/c/node0.vars.fd",
				},
				argsDisk, argsBoard, argsTail},
		},
		{
			name: "direct boot replaces OVMF, keeps the disk",
			change: func(p *plan) {
				p.direct = &DirectBoot{Kernel: "/o/vmlinuz", Initrd: "/o/initramfs.img", Cmdline: "console=ttyS0 cairn.test.root-fail"}
			},
			want: [][]string{argsHead, argsTCG,
				{"-kernel", "/o/vmlinuz", "-initrd", "/o/initramfs.img", "-append", "console=ttyS0 cairn.test.root-fail"},
				argsDisk, argsBoard, argsTail},
		},
		{
			name: "direct boot without initrd or disk",
			change: func(p *plan) {
				p.disk = ""
				p.direct = &DirectBoot{Kernel: "/o/vmlinuz", Cmdline: "quiet"}
			},
			want: [][]string{argsHead, argsTCG,
				{"-kernel", "/o/vmlinuz", "-append", "quiet"},
				argsBoard, argsTail},
		},
		{
			name:   "raw snapshot when qemu-img is missing",
			change: func(p *plan) { p.disk, p.diskMode = "/img/cairn.img", diskSnapshot },
			want: [][]string{argsHead, argsTCG, argsOVMF,
				{
					"-drive", "if=none,id=disk0,format=raw,snapshot=on,cache=unsafe,file=/img/cairn.img",
					"-device", "virtio-blk-pci,drive=disk0,bootindex=1",
				},
				argsBoard, argsTail},
		},
		{
			name:   "writable image",
			change: func(p *plan) { p.disk, p.diskMode = "/t/disk.img", diskWritable },
			want: [][]string{argsHead, argsTCG, argsOVMF,
				{
					"-drive", "if=none,id=disk0,format=raw,cache=writeback,file=/t/disk.img",
					"-device", "virtio-blk-pci,drive=disk0,bootindex=1",
				},
				argsBoard, argsTail},
		},
		{
			name: "no reboot and extra arguments come last",
			change: func(p *plan) {
				p.noReboot = true
				p.extraArgs = []string{"-d", "guest_errors"}
			},
			want: [][]string{argsHead, argsTCG, argsOVMF, argsDisk, argsBoard, argsTail,
				{"-no-reboot", "-d", "guest_errors"}},
		},
		{
			name: "commas in paths are doubled",
			change: func(p *plan) {
				p.name = "a,b"
				p.disk = "/s,1/disk.qcow2"
				p.ovmfVars = "/s,1/VARS.fd"
				p.qmpSocket = "/s,1/qmp.sock"
			},
			want: [][]string{
				{"-name", "a,,b", "-nodefaults", "-no-user-config", "-display", "none", "-machine", "q35"},
				argsTCG,
				{
					"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
					"-drive", "if=pflash,format=raw,unit=1,file=/s,,1/VARS.fd",
				},
				{
					"-drive", "if=none,id=disk0,format=qcow2,cache=unsafe,file=/s,,1/disk.qcow2",
					"-device", "virtio-blk-pci,drive=disk0,bootindex=1",
				},
				argsBoard,
				{
					"-chardev", "stdio,id=console,signal=off",
					"-serial", "chardev:console",
					"-qmp", "unix:/s,,1/qmp.sock,server=on,wait=off",
				},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePlan()
			tc.change(&p)
			if diff := cmp.Diff(slices.Concat(tc.want...), p.args()); diff != "" {
				t.Errorf("args() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMACFor(t *testing.T) {
	a, b := MACFor("node-1"), MACFor("node-2")
	if a == b {
		t.Errorf("MACFor(%q) = MACFor(%q) = %q, want different addresses", "node-1", "node-2", a)
	}
	if MACFor("node-1") != a {
		t.Errorf("MACFor(%q) changed between calls", "node-1")
	}
	if a[:9] != "52:54:00:" {
		t.Errorf("MACFor(%q) = %q, want one in 52:54:00", "node-1", a)
	}
}
