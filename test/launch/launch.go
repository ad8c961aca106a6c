package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cairn.dev/cairn/node/parameters"
)

// Launch prepares a node's host resources and starts qemu. It returns once
// qemu is running and its QMP socket exists, or with an error that names
// what failed (and qemu's stderr, if qemu got that far). ctx bounds only
// the start; the node runs until it stops by itself, is told to, or Close.
// Always Close the returned node.
func Launch(ctx context.Context, cfg Config, opts ...Option) (*Node, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkConfig(&cfg, &o); err != nil {
		return nil, err
	}
	sweepStale(os.TempDir())

	dir, err := os.MkdirTemp("", stateDirPrefix+safeName(cfg.Name)+"-")
	if err != nil {
		return nil, fmt.Errorf("when making state directory: %w", err)
	}
	n := &Node{
		name:    cfg.Name,
		dir:     dir,
		console: NewConsole(),
		stderr:  newTailBuffer(8 << 10),
		exited:  make(chan struct{}),
		read:    make(chan struct{}),
	}
	if err := n.start(ctx, cfg, o); err != nil {
		n.Close()
		return nil, fmt.Errorf("launching node %s: %w", cfg.Name, err)
	}
	return n, nil
}

func checkConfig(cfg *Config, o *options) error {
	if cfg.Name == "" {
		cfg.Name = "node"
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = DefaultMemoryMiB
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.MemoryMiB < 0 || cfg.CPUs < 0 {
		return fmt.Errorf("node %s: negative memory or CPUs", cfg.Name)
	}
	if cfg.Image == "" && o.direct == nil {
		return fmt.Errorf("node %s: no image to boot", cfg.Name)
	}
	if o.direct != nil && o.direct.Kernel == "" {
		return fmt.Errorf("node %s: direct boot without a kernel", cfg.Name)
	}
	if o.parameters != nil {
		o.fwcfg = append([]FWCfgFile{{Name: parameters.FWCfgName, Data: o.parameters}}, o.fwcfg...)
	}
	for _, f := range o.fwcfg {
		if err := checkFWCfgName(f.Name); err != nil {
			return fmt.Errorf("node %s: %w", cfg.Name, err)
		}
	}
	accel, err := resolveAccel(o.accel, os.Stderr)
	if err != nil {
		return fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	o.kvm = accel.KVM
	return nil
}

// start fills the state directory, starts swtpm and qemu, and waits for
// the QMP socket.
func (n *Node) start(ctx context.Context, cfg Config, o options) error {
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := os.WriteFile(filepath.Join(n.dir, launcherPIDFile), pid, 0o644); err != nil {
		return fmt.Errorf("when writing launcher PID: %w", err)
	}
	p := plan{
		name:      cfg.Name,
		memoryMiB: cfg.MemoryMiB,
		cpus:      cfg.CPUs,
		kvm:       o.kvm,
		cpu:       o.cpu,
		direct:    o.direct,
		network:   o.network,
		qmpSocket: filepath.Join(n.dir, "qmp.sock"),
		noReboot:  o.noReboot,
		extraArgs: o.extraArgs,

		hotplugPort: o.hotplugPort,
		usbPort:     o.usbPort,
	}
	if cfg.Image != "" {
		image, err := filepath.Abs(cfg.Image)
		if err != nil {
			return fmt.Errorf("when resolving image path: %w", err)
		}
		if _, err := os.Stat(image); err != nil {
			return fmt.Errorf("image: %w", err)
		}
		if o.writableImage {
			if err := growDisk(image, DiskSize); err != nil {
				return err
			}
			p.disk, p.diskMode = image, diskWritable
		} else if _, err := exec.LookPath(o.qemuImg); err != nil {
			// qemu makes and removes an overlay of its own.
			p.disk, p.diskMode = image, diskSnapshot
		} else {
			p.disk, p.diskMode = filepath.Join(n.dir, "disk.qcow2"), diskOverlay
			if err := createOverlay(ctx, o.qemuImg, image, p.disk); err != nil {
				return err
			}
		}
	}
	var err error
	if o.direct == nil {
		p.ovmfCode, p.secureBoot = o.ovmfCode, o.secureBoot
		if p.ovmfVars, err = varStore(n.dir, o.ovmfVars, o.varStore); err != nil {
			return err
		}
	}
	if p.fwcfg, err = writeFWCfg(n.dir, o.fwcfg); err != nil {
		return err
	}
	if o.tpm {
		if p.tpmSocket, err = n.startSWTPM(ctx, o.swtpm, o.tpmState); err != nil {
			return err
		}
	}
	n.consolePath = o.consoleFile
	if n.consolePath == "" {
		n.consolePath = filepath.Join(n.dir, "console.log")
	}
	n.qmpSocket = p.qmpSocket
	if err := n.startQEMU(o.qemu, p.args(), o.consoleCopy); err != nil {
		return err
	}
	return n.waitQMPSocket(ctx)
}

// createOverlay makes a qcow2 file at path that reads through to the raw
// image (an absolute path) and takes every write itself. The disk it
// makes is diskSize large: beyond the image, it reads zeros.
func createOverlay(ctx context.Context, qemuImg, image, path string) error {
	size, err := diskSize(image)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", "qcow2", "-b", image, "-F", "raw",
		path, strconv.FormatInt(size, 10))
	cmd.SysProcAttr = childAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("when creating disk overlay: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// varStore returns the firmware variable store for qemu to write: a
// copy of template in the node's state directory dir, or the file keep
// when WithVarStore named one. keep is copied from template only when it
// does not exist yet, so the boot entries and BootOrder the node wrote
// survive into its next launch; the copy goes through a temporary file,
// so a launcher killed while copying leaves no half store behind.
func varStore(dir, template, keep string) (string, error) {
	if keep == "" {
		path := filepath.Join(dir, "OVMF_VARS.fd")
		if err := copyFile(template, path); err != nil {
			return "", fmt.Errorf("when copying OVMF variables: %w", err)
		}
		return path, nil
	}
	path, err := filepath.Abs(keep)
	if err != nil {
		return "", fmt.Errorf("when resolving OVMF variable store path: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("when looking for the OVMF variable store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("when making the OVMF variable store's directory: %w", err)
	}
	tmp := path + ".tmp"
	// A launcher killed while copying left this behind.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("when removing a stale OVMF variable store: %w", err)
	}
	if err := copyFile(template, tmp); err != nil {
		return "", fmt.Errorf("when copying OVMF variables: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("when putting the OVMF variable store in place: %w", err)
	}
	return path, nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// writeFWCfg writes each fw_cfg file's data into dir for qemu to read.
func writeFWCfg(dir string, files []FWCfgFile) ([]fwcfgPath, error) {
	var paths []fwcfgPath
	for i, f := range files {
		path := filepath.Join(dir, fmt.Sprintf("fwcfg-%d", i))
		if err := os.WriteFile(path, f.Data, 0o600); err != nil {
			return nil, fmt.Errorf("when writing fw_cfg file %s: %w", f.Name, err)
		}
		paths = append(paths, fwcfgPath{name: f.Name, path: path})
	}
	return paths, nil
}

// startSWTPM starts a TPM 2.0 emulator with its state in stateDir, or in
// the node's state directory when stateDir is empty, and returns its
// control socket once it exists. The socket always lives in the node's
// state directory, whose short path keeps it within the limit of socket
// path lengths.
func (n *Node) startSWTPM(ctx context.Context, bin, stateDir string) (string, error) {
	sockDir := filepath.Join(n.dir, "swtpm")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return "", fmt.Errorf("when making TPM state directory: %w", err)
	}
	state := sockDir
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return "", fmt.Errorf("when making TPM state directory: %w", err)
		}
		state = stateDir
	}
	socket := filepath.Join(sockDir, "ctrl.sock")
	cmd := exec.Command(bin, "socket", "--tpm2",
		"--tpmstate", "dir="+opt(state),
		"--ctrl", "type=unixio,path="+opt(socket),
	)
	cmd.SysProcAttr = childAttr()
	stderr := newTailBuffer(4 << 10)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("when starting swtpm: %w", err)
	}
	n.tpm = cmd
	n.tpmDone = make(chan struct{})
	go func() {
		cmd.Wait()
		close(n.tpmDone)
	}()
	err := waitForFile(ctx, socket, n.tpmDone)
	if err != nil {
		return "", fmt.Errorf("when waiting for swtpm socket: %w; swtpm output: %s", err, stderr)
	}
	return socket, nil
}

// waitForFile polls until path exists, ctx ends or died is closed.
func waitForFile(ctx context.Context, path string, died <-chan struct{}) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-died:
			// One last look: the process may have made it and exited.
			if _, err := os.Stat(path); err == nil {
				return nil
			}
			return errors.New("process exited first")
		case <-tick.C:
		}
	}
}

// startQEMU starts qemu and the goroutines that follow it: one copies the
// console until qemu closes it, one waits for qemu's exit.
func (n *Node) startQEMU(bin string, args []string, consoleCopy io.Writer) error {
	file, err := os.OpenFile(n.consolePath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("when opening console file: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		file.Close()
		return fmt.Errorf("when making console pipe: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = childAttr()
	// Whatever qemu keeps in temporary files (the snapshot overlay when
	// qemu-img is missing) goes with the state directory, even after a
	// kill.
	cmd.Env = append(os.Environ(), "TMPDIR="+n.dir)
	cmd.Stdout = pw
	cmd.Stderr = n.stderr
	n.started = time.Now()
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		file.Close()
		return fmt.Errorf("when starting qemu: %w", err)
	}
	n.cmd = cmd

	writers := []io.Writer{file}
	if consoleCopy != nil {
		writers = append(writers, consoleCopy)
	}
	go n.readConsole(pr, file, writers)
	go func() {
		err := cmd.Wait()
		// Wait returns with the whole console read.
		<-n.read
		if err != nil {
			n.exitErr = fmt.Errorf("qemu of node %s: %w; qemu stderr: %s", n.name, err, n.stderr)
		}
		close(n.exited)
	}()
	return nil
}

// readConsole feeds the console from qemu's standard output until qemu
// closes it, then closes the console and its file.
func (n *Node) readConsole(r, file io.ReadCloser, writers []io.Writer) {
	defer close(n.read)
	defer file.Close()
	defer r.Close()
	defer n.console.Close()
	buf := make([]byte, 32<<10)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			for _, w := range writers {
				// A failing copy must not stop the console.
				_, _ = w.Write(buf[:k])
			}
			n.console.Write(buf[:k])
		}
		if err != nil {
			return
		}
	}
}

func (n *Node) waitQMPSocket(ctx context.Context) error {
	err := waitForFile(ctx, n.qmpSocket, n.exited)
	if err == nil {
		return nil
	}
	select {
	case <-n.exited:
		if n.exitErr != nil {
			return fmt.Errorf("qemu exited before its QMP socket appeared: %w", n.exitErr)
		}
		return fmt.Errorf("qemu exited before its QMP socket appeared; qemu stderr: %s", n.stderr)
	default:
		return fmt.Errorf("when waiting for QMP socket: %w; qemu stderr: %s", err, n.stderr)
	}
}

// safeName keeps the characters of a node name that are safe in a file
// name.
func safeName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}
