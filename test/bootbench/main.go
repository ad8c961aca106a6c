// Command bootbench measures how long Cairn takes to boot, and how much of
// that is Cairn's own: it boots out/cairn.img and the null image (same
// kernel and firmware, an init that only powers off) several times each
// through OVMF, one boot at a time, and prints min / median / max of every
// boot phase for both, then Cairn's cost against the null image's floor.
// Each boot is a node as make cluster boots it: a fresh copy of the image,
// written in place, and a new TPM 2.0 (swtpm) that the firmware and the
// UKI's stub measure into; every image is also booted without the TPM, to
// show what measuring costs, and with the TPM again under Secure Boot
// (firmware that enforces it, on a machine with SMM), to show what that
// costs. For Cairn it also times the steps after the
// supervisor starts, up to where a node without parameters waits: the
// system partition mounted, the network address, the data partition's
// modules loaded.
//
//	go run ./test/bootbench [-image-dir out] [-boots 5] [-tpm both|on|off] [-secureboot=false]
//
// `make bench-boot` runs it after building the images.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"cairn.dev/cairn/test/launch"
)

func main() {
	dir := flag.String("image-dir", "out", "directory with cairn.img and null.img")
	boots := flag.Int("boots", 5, "boots of each image in each setup")
	memory := flag.Int("memory", 2048, "memory of the node in MiB")
	tpm := flag.String("tpm", "both", "boot with a TPM 2.0 (swtpm), as make cluster does: on, off or both")
	secureBoot := flag.Bool("secureboot", true, "also boot each image under Secure Boot, with a TPM")
	timeout := flag.Duration("timeout", 5*time.Minute, "deadline of each boot")
	flag.Parse()

	var tpms []bool
	switch *tpm {
	case "both":
		tpms = []bool{true, false}
	case "on":
		tpms = []bool{true}
	case "off":
		tpms = []bool{false}
	default:
		fmt.Fprintf(os.Stderr, "bootbench: -tpm %q: want on, off or both\n", *tpm)
		os.Exit(2)
	}
	var setups []setup
	for _, t := range tpms {
		setups = append(setups, setup{tpm: t})
	}
	if *secureBoot {
		setups = append(setups, setup{tpm: true, secureBoot: true})
	}
	b := bench{memoryMiB: *memory, timeout: *timeout}
	cairn := subject{name: "cairn.img", image: filepath.Join(*dir, "cairn.img"), marks: launch.CairnBoot, milestones: cairnMilestones}
	null := subject{name: "null.img", image: filepath.Join(*dir, "null.img"), marks: launch.NullBoot}
	load := loadAverage()
	results := map[setup][][]launch.Phase{}
	// The boots alternate between the images and the setups, so that a
	// change in what else the machine runs weighs on all alike.
	for i := range *boots {
		for _, how := range setups {
			for _, s := range []subject{cairn, null} {
				st := how.of(s)
				phases, err := b.boot(s, st, i)
				if err != nil {
					fmt.Fprintf(os.Stderr, "bootbench: %s boot %d: %v\n", st, i+1, err)
					os.Exit(1)
				}
				fmt.Fprintf(os.Stderr, "bootbench: %s boot %d/%d: %.3f s\n", st, i+1, *boots, phases[len(launch.PhaseNames)-1].Duration.Seconds())
				results[st] = append(results[st], phases)
			}
		}
	}
	accel, err := launch.ChooseAccel(launch.AccelAuto)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bootbench: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("boot phases over %d boots of each image through OVMF, %s, %d MiB, each from a fresh copy of its image written in place (as make cluster)\n", *boots, accel, *memory)
	fmt.Printf("host load average (1 min) %s before, %s after\n\n", load, loadAverage())
	for _, how := range setups {
		for _, s := range []subject{cairn, null} {
			st := how.of(s)
			fmt.Print(summaryTable(st.String(), summarize(results[st])))
			fmt.Println()
		}
	}
	for _, how := range setups {
		c, n := how.of(cairn), how.of(null)
		fmt.Print(costTable(fmt.Sprintf("Cairn's cost against the null image's floor, %s (medians)", how.how()), "cairn", "null",
			summarize(results[c]), summarize(results[n])))
		fmt.Println()
	}
	for _, s := range []subject{cairn, null} {
		with, without := setup{s.name, true, false}, setup{s.name, false, false}
		if results[with] != nil && results[without] != nil {
			fmt.Print(costTable(fmt.Sprintf("What the TPM costs %s (medians)", s.name), "TPM", "none",
				summarize(results[with]), summarize(results[without])))
			fmt.Println()
		}
		with, without = setup{s.name, true, true}, setup{s.name, true, false}
		if results[with] != nil && results[without] != nil {
			fmt.Print(costTable(fmt.Sprintf("What Secure Boot costs %s, with a TPM (medians)", s.name), "SB", "none",
				summarize(results[with]), summarize(results[without])))
			fmt.Println()
		}
	}
}

// A setup is an image booted with or without a TPM, and with or without
// Secure Boot.
type setup struct {
	image      string
	tpm        bool
	secureBoot bool
}

// of is the setup for s's image.
func (s setup) of(sub subject) setup {
	s.image = sub.name
	return s
}

// how says how the image boots.
func (s setup) how() string {
	h := "without a TPM"
	if s.tpm {
		h = "with a TPM"
	}
	if s.secureBoot {
		h += ", under Secure Boot"
	}
	return h
}

func (s setup) String() string { return s.image + ", " + s.how() }

// loadAverage returns the host's one-minute load average, which says how
// much the other work on the machine may have slowed the boots.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// subject is an image to boot and how to tell that it booted.
type subject struct {
	name  string
	image string
	marks launch.BootMarks
	// milestones are lines after Ready that the boot also waits for,
	// each timed from the init line: what the node does once its
	// supervisor runs.
	milestones []milestone
}

// A milestone is a line of the boot that names a phase.
type milestone struct {
	name string
	line launch.Matcher
}

// cairnMilestones are the steps of a Cairn node's boot after the
// supervisor started, up to where a node without parameters waits.
var cairnMilestones = []milestone{
	{"/init → system mounted", launch.Substring("cairn: system partition a mounted")},
	{"/init → network address", launch.Substring("cairn: network address")},
	{"/init → data modules", launch.Substring("modules for the data partition")},
}

type bench struct {
	memoryMiB int
	timeout   time.Duration
}

// boot boots s once as st says (a new TPM or none, Secure Boot or not),
// and returns its phases. Power-off is the end-to-end suites' business:
// once booted, the node is stopped at once.
func (b bench) boot(s subject, st setup, i int) ([]launch.Phase, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	disk, err := freshCopy(ctx, s.image)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Dir(disk))
	opts := []launch.Option{launch.WithWritableImage()}
	if st.tpm {
		opts = append(opts, launch.WithTPM())
	}
	if st.secureBoot {
		opts = append(opts, launch.WithSecureBoot())
	}
	cfg := launch.Config{Name: fmt.Sprintf("bench%d", i), Image: disk, MemoryMiB: b.memoryMiB}
	n, err := launch.Launch(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	if _, err := n.WaitFor(ctx, s.marks.Ready); err != nil {
		return nil, fmt.Errorf("%w\nlast console lines:\n%s", err, n.Console().Tail(20))
	}
	t, err := launch.BootTimings(n.Started(), n.Console().Lines(), 0, s.marks)
	if err != nil {
		return nil, err
	}
	phases := t.Phases()
	if len(s.milestones) == 0 {
		return phases, nil
	}
	init, err := n.WaitFor(ctx, s.marks.Init)
	if err != nil {
		return nil, err
	}
	for _, m := range s.milestones {
		l, err := n.WaitFor(ctx, m.line)
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w\nlast console lines:\n%s", m.name, err, n.Console().Tail(20))
		}
		from, ok1 := init.Uptime()
		to, ok2 := l.Uptime()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("the lines of %s carry no uptime: %q, %q", m.name, init.Text, l.Text)
		}
		phases = append(phases, launch.Phase{Name: m.name, Duration: to - from})
	}
	return phases, nil
}

// freshCopy copies image as make cluster gives each node its disk (sparse,
// into a directory of its own), and returns the copy's path.
func freshCopy(ctx context.Context, image string) (string, error) {
	dir, err := os.MkdirTemp("", "bootbench-")
	if err != nil {
		return "", fmt.Errorf("when making a directory for the disk: %w", err)
	}
	disk := filepath.Join(dir, filepath.Base(image))
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", image, disk).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("when copying %s: %w: %s", image, err, strings.TrimSpace(string(out)))
	}
	return disk, nil
}
