package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Node is one running qemu virtual machine and the host resources it uses.
//
// Its goroutines: one reads the console until qemu closes it (read is
// closed after), one waits for qemu's exit and the console's end (exited),
// and with a TPM one waits for swtpm's (tpmDone). All of them end once their process has
// exited, which Close makes sure of.
type Node struct {
	name        string
	dir         string
	console     *Console
	consolePath string
	qmpSocket   string
	stderr      *tailBuffer
	started     time.Time

	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error // set before exited is closed
	read    chan struct{}

	tpm     *exec.Cmd
	tpmDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Console returns the node's serial console.
func (n *Node) Console() *Console { return n.console }

// ConsolePath returns the file that holds the raw serial console. Unless
// WithConsoleFile chose it, it is removed by Close.
func (n *Node) ConsolePath() string { return n.consolePath }

// Started returns the host time just before qemu was started.
func (n *Node) Started() time.Time { return n.started }

// WaitFor waits for a console line that m matches (see Console.WaitFor).
// When qemu exits first, the error says how, with qemu's stderr.
func (n *Node) WaitFor(ctx context.Context, m Matcher) (Line, error) {
	return n.WaitFrom(ctx, 0, m)
}

// WaitFrom waits for a console line at or after index from that m matches
// (see Console.WaitFrom).
func (n *Node) WaitFrom(ctx context.Context, from int, m Matcher) (Line, error) {
	l, err := n.console.WaitFrom(ctx, from, m)
	if errors.Is(err, ErrConsoleClosed) {
		<-n.exited
		how := "qemu exited with status 0"
		if n.exitErr != nil {
			how = n.exitErr.Error()
		}
		return l, fmt.Errorf("node %s: %w (%s)", n.name, err, how)
	}
	if err != nil {
		return l, fmt.Errorf("node %s: %w", n.name, err)
	}
	return l, nil
}

// Powerdown presses the virtual power button (QMP system_powerdown): the
// guest is asked to shut down and power off, after which qemu exits.
func (n *Node) Powerdown(ctx context.Context) error {
	if err := qmpExecute(ctx, n.qmpSocket, "system_powerdown", false); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}

// AttachDisk plugs the raw image at path into the running node as a
// read-only virtio disk, as an operator adds a disk to a machine that is
// on: the disk goes into the empty slot of WithHotplugPort, so a node
// takes one such disk. The guest sees it appear as the kernel enumerates
// the slot.
func (n *Node) AttachDisk(ctx context.Context, path string) error {
	return n.attach(ctx, path, "disk", map[string]any{
		"driver": "virtio-blk-pci",
		"bus":    hotplugPortID,
	})
}

// AttachStick plugs the raw image at path into the running node as a
// read-only USB stick (usb-storage), as an operator plugs one into a
// machine that is on: it goes onto the bus of WithUSBPort's controller.
// The guest sees a USB device appear, loads its driver, and then finds a
// SCSI disk.
func (n *Node) AttachStick(ctx context.Context, path string) error {
	return n.attach(ctx, path, "stick", map[string]any{
		"driver":    "usb-storage",
		"bus":       usbControllerID + ".0",
		"removable": true,
	})
}

// attach adds the raw image at path to the running node as a read-only
// block device, and then the device of the properties device over it;
// what names the device in errors.
func (n *Node) attach(ctx context.Context, path, what string, device map[string]any) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("node %s: when resolving the %s's path: %w", n.name, what, err)
	}
	node := "attached-" + what
	device["id"], device["drive"] = node+"-device", node
	err = qmpRun(ctx, n.qmpSocket, false,
		qmpCommand{Execute: "blockdev-add", Arguments: map[string]any{
			"node-name": node,
			"driver":    "raw",
			"read-only": true,
			"file":      map[string]any{"driver": "file", "filename": abs},
		}},
		qmpCommand{Execute: "device_add", Arguments: device},
	)
	if err != nil {
		return fmt.Errorf("node %s: when attaching the %s %s: %w", n.name, what, path, err)
	}
	return nil
}

// Quit ends qemu at once (QMP quit) without asking the guest.
func (n *Node) Quit(ctx context.Context) error {
	if err := qmpExecute(ctx, n.qmpSocket, "quit", true); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}

// Kill ends qemu with SIGKILL and returns once it has exited.
func (n *Node) Kill() error {
	if n.cmd == nil {
		return nil
	}
	if err := kill(n.cmd); err != nil {
		return fmt.Errorf("when killing qemu of node %s: %w", n.name, err)
	}
	<-n.exited
	return nil
}

// Done is closed when qemu has exited and its console has been read to the
// end.
func (n *Node) Done() <-chan struct{} { return n.exited }

// Wait waits for qemu to exit (and its last console lines to be read). It
// returns nil for exit status 0, or an error with the status and qemu's
// stderr, in which errors.As finds the *exec.ExitError. It returns ctx's
// error if ctx ends first; qemu keeps running then.
func (n *Node) Wait(ctx context.Context) error {
	select {
	case <-n.exited:
		return n.exitErr
	case <-ctx.Done():
		return fmt.Errorf("waiting for qemu of node %s to exit: %w", n.name, context.Cause(ctx))
	}
}

// Close kills qemu and swtpm if they still run, waits for them and removes
// the state directory. It is safe to call more than once and concurrently;
// every call returns the first call's result.
func (n *Node) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Node) close() error {
	var errs []error
	if n.cmd != nil {
		if err := n.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.tpm != nil {
		if err := kill(n.tpm); err != nil {
			errs = append(errs, fmt.Errorf("when killing swtpm of node %s: %w", n.name, err))
		}
		<-n.tpmDone
	}
	if err := os.RemoveAll(n.dir); err != nil {
		errs = append(errs, fmt.Errorf("when removing state of node %s: %w", n.name, err))
	}
	return errors.Join(errs...)
}
