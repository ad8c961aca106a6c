package modules

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/kmod"
)

const (
	// ModprobeName is the name the node binary answers to as modprobe:
	// the core links /sbin/modprobe to /init, and whoever runs the link
	// (the kernel, or a tool that wants a module) passes that argv[0].
	ModprobeName = "modprobe"
	// modprobePath is the program the kernel runs for request_module(9),
	// written to modprobeSysctl at boot. It is also the default the Debian
	// kernel is built with (CONFIG_MODPROBE_PATH).
	modprobePath   = "/sbin/modprobe"
	modprobeSysctl = "/proc/sys/kernel/modprobe"
	// nodeBinary is where the initramfs holds this binary.
	nodeBinary = "/init"
	// modprobeDeadline bounds a whole run: the kernel's caller, such as a
	// dm-crypt table load, waits until modprobe exits.
	modprobeDeadline = 10 * time.Second
	// modprobeLine starts the line every run writes to the kernel log
	// (docs/testing.md lists it; TestNoAESNI waits for it).
	modprobeLine = "cairn-modprobe: "
	// procModules lists the modules loaded already.
	procModules = "/proc/modules"
)

// Levels of the kernel log: the console shows warnings and information
// (CONFIG_CONSOLE_LOGLEVEL_DEFAULT is 7), debug lines stay in the ring
// buffer for dmesg.
const (
	kmsgWarning = 4
	kmsgInfo    = 6
	kmsgDebug   = 7
)

// serveModuleRequests points the kernel at modprobe mode: it links link
// (modprobePath) to the node binary, then writes link to sysctl
// (modprobeSysctl), and from then on request_module runs it.
//
// The initramfs does not carry the link, so that the kernel's own requests
// during its initcalls, before /init starts, find no modprobe and fail at
// once. They are six (crypto-hmac(sha256), crypto-hmac(sha1),
// crypto-cbc(aes) and their "-all" forms, templates the kernel has built
// in), and each started this binary, whose runtime and package
// initialisation take 0.1 to 0.2 s under emulation: 0.6 s of every boot.
func serveModuleRequests(link, sysctl string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("when linking %s to %s: %w", link, nodeBinary, err)
	}
	if err := os.Symlink(nodeBinary, link); err != nil {
		if target, rerr := os.Readlink(link); rerr != nil || target != nodeBinary {
			return fmt.Errorf("when linking %s to %s: %w", link, nodeBinary, err)
		}
	}
	if err := os.WriteFile(sysctl, []byte(link+"\n"), 0o644); err != nil {
		return fmt.Errorf("when setting the kernel's modprobe: %w", err)
	}
	return nil
}

// RunModprobe is modprobe mode, the whole life of a process the kernel
// started for request_module: it loads what the names in args (argv[0]
// left out) resolve to and returns the exit code, 0 when every name was
// served.
func RunModprobe(args []string) int {
	start := time.Now()
	// Whatever hangs, the kernel's caller gets an answer in time.
	deadline := time.AfterFunc(modprobeDeadline, func() {
		writeKmsg(kmsgWarning, fmt.Sprintf("%sgave up after %v on %s", modprobeLine, modprobeDeadline, strings.Join(args, " ")))
		os.Exit(1)
	})
	defer deadline.Stop()

	a, err := parseModprobeArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "modprobe: %v\nusage: modprobe [-qbs] [--] NAME, or modprobe -a [-qbs] [--] NAME...\n", err)
		return 1
	}
	l, err := openLoader(moduleDir(), procModules)
	if err != nil {
		writeKmsg(kmsgWarning, fmt.Sprintf("%s%s: %v", modprobeLine, strings.Join(a.names, " "), err))
		return 1
	}
	r := serveRequests(l, a.names)
	level, msg := r.line(runningFor(start))
	writeKmsg(level, modprobeLine+msg)
	if !r.ok() {
		if !a.quiet {
			fmt.Fprintf(os.Stderr, "modprobe: %s\n", msg)
		}
		return 1
	}
	return 0
}

// modprobeArgs is what a modprobe command line asks for.
type modprobeArgs struct {
	// names are the modules or aliases to load.
	names []string
	// quiet asks for nothing on standard error (-q).
	quiet bool
}

// parseModprobeArgs reads the arguments of modprobe mode, argv[0] left
// out: "-q -- crypto-ecb" from the kernel (call_modprobe), "xt_conntrack
// -q" from iptables, "-- ip_vs" from kube-proxy. Options may follow names
// until "--"; -b and -s are taken and mean nothing here (there is no
// blacklist, and the kernel log is where modprobe mode always writes).
// Several names need -a, as in modprobe, where more arguments would be
// module parameters, which modprobe mode does not take.
func parseModprobeArgs(args []string) (modprobeArgs, error) {
	var a modprobeArgs
	all := false
	for i, arg := range args {
		if arg == "--" {
			a.names = append(a.names, args[i+1:]...)
			break
		}
		var opts []string
		switch {
		case strings.HasPrefix(arg, "--"):
			opts = []string{arg[2:]}
		case len(arg) > 1 && arg[0] == '-':
			opts = strings.Split(arg[1:], "")
		default:
			a.names = append(a.names, arg)
			continue
		}
		for _, o := range opts {
			switch o {
			case "q", "quiet":
				a.quiet = true
			case "a", "all":
				all = true
			case "b", "use-blacklist", "s", "syslog":
			default:
				return modprobeArgs{}, fmt.Errorf("option %q is not supported", arg)
			}
		}
	}
	switch {
	case len(a.names) == 0:
		return modprobeArgs{}, errors.New("no module named")
	case len(a.names) > 1 && !all:
		return modprobeArgs{}, fmt.Errorf("module parameters are not supported: %q", a.names[1:])
	}
	for _, n := range a.names {
		if n == "" || n[0] == '-' || strings.ContainsAny(n, "/ \t\n") {
			return modprobeArgs{}, fmt.Errorf("%q is not a module name or alias", n)
		}
	}
	return a, nil
}

// modprobeResult is what one run did with the names it was asked for.
type modprobeResult struct {
	names []string
	// loaded are the modules the run loaded, dependencies first.
	loaded []string
	// missing are the names that resolve to no module.
	missing []string
	// failed are the errors of names whose modules all failed to load.
	failed []error
}

// serveRequests loads, with l, what each of names resolves to.
func serveRequests(l *kmod.Loader, names []string) modprobeResult {
	r := modprobeResult{names: names}
	for _, n := range names {
		err := l.Request(n)
		switch {
		case errors.Is(err, kmod.ErrNotFound):
			r.missing = append(r.missing, n)
		case err != nil:
			r.failed = append(r.failed, err)
		}
	}
	r.loaded = l.Loaded()
	return r
}

// ok reports whether every name was served: its module loaded, or it was
// loaded already or built in.
func (r modprobeResult) ok() bool { return len(r.missing) == 0 && len(r.failed) == 0 }

// line returns the run's one line for the kernel log, without
// modprobeLine, and its level: a warning when modules failed to load,
// information when the run loaded some, and debug otherwise. The kernel
// asks for many names that no module provides ("crypto-xts(aes)") before
// the ones that do ("crypto-xts"), and for modules of hardware the
// machine lacks ("crypto-aes" leads to aesni_intel, which refuses a CPU
// without AES-NI with ENODEV): neither is worth a warning.
func (r modprobeResult) line(took time.Duration) (int, string) {
	level := kmsgDebug
	var parts []string
	if len(r.loaded) > 0 {
		level = kmsgInfo
		parts = append(parts, fmt.Sprintf("loaded %s (for %s) in %.2fs",
			strings.Join(r.loaded, " "), strings.Join(r.names, " "), took.Seconds()))
	}
	for _, err := range r.failed {
		if !noDevice(err) {
			level = kmsgWarning
		}
		parts = append(parts, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	for _, n := range r.missing {
		parts = append(parts, "no module for "+n)
	}
	if len(parts) == 0 {
		parts = append(parts, strings.Join(r.names, " ")+": built in or loaded already")
	}
	return level, strings.Join(parts, "; ")
}

// noDevice reports whether err, the failure of a request, comes from
// modules that each found no device to drive.
func noDevice(err error) bool {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return errors.Is(err, unix.ENODEV)
	}
	for _, e := range joined.Unwrap() {
		if !noDevice(e) {
			return false
		}
	}
	return true
}

// writeKmsg writes one line to the kernel log at level. There is nowhere
// to report a failure to: the kernel gives modprobe no console.
func writeKmsg(level int, line string) {
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "<%d>%s\n", level, line)
}

// userHZ is the unit of the times in /proc/<pid>/stat: 1/100 s on every
// architecture Cairn runs on.
const userHZ = 100

// sinceBoot returns the time since the kernel started, from
// CLOCK_BOOTTIME, the clock of /proc/<pid>/stat's start times.
func sinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// runningFor returns how long this process has run: from the start time
// the kernel keeps for it, so that the exec and the start of the Go
// runtime count too, or from fallback where /proc is not mounted.
func runningFor(fallback time.Time) time.Duration {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if ticks, ok := statStartTime(b); ok {
			if d := sinceBoot() - time.Duration(ticks)*time.Second/userHZ; d >= 0 {
				return d
			}
		}
	}
	return time.Since(fallback)
}

// statStartTime returns field 22 of a /proc/<pid>/stat line, the time the
// process started in clock ticks since boot. The fields are counted after
// the command's closing parenthesis, as the command may hold spaces and
// parentheses of its own.
func statStartTime(stat []byte) (uint64, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	// After ")" comes field 3 (state); field 22 is the 20th.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return t, err == nil
}
