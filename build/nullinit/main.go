// Command nullinit is the smallest possible /init: it writes one line to
// the serial console and powers the machine off. Booted with the same
// kernel as Cairn and an initramfs holding nothing else, it measures the
// floor of boot time (firmware, stub, kernel, initramfs unpacking) that
// every Cairn boot pays before its own /init runs.
package main

import (
	"os"
	"syscall"
)

func main() {
	// The serial port directly: the kernel's console may also be the
	// screen, and this line is what boot benchmarks wait for.
	if tty, err := os.OpenFile("/dev/ttyS0", os.O_WRONLY|syscall.O_NOCTTY, 0); err == nil {
		tty.WriteString("null init: powering off\n")
		tty.Close()
	} else {
		os.Stdout.WriteString("null init: powering off\n")
	}
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		// PID 1 must not exit: the kernel would panic. Wait instead.
		os.Stderr.WriteString("null init: power off failed: " + err.Error() + "\n")
		select {}
	}
}
