// Command launch-cluster boots a local Cairn node in qemu for people, the
// way `make cluster` runs it: the node's serial console streams to standard
// output until Ctrl-C, which presses the node's power button and waits for
// it to power off (a second Ctrl-C, or a timeout, kills it instead).
//
// For now it boots a single node; the qemu work is test/launch's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cairn.dev/cairn/test/launch"
)

func main() {
	image := flag.String("image", "out/cairn.img", "raw disk image to boot (never modified)")
	memory := flag.Int("memory", 2048, "memory of the node in MiB")
	cpus := flag.Int("cpus", 2, "virtual CPUs of the node")
	tpm := flag.Bool("tpm", true, "give the node a TPM 2.0 (swtpm)")
	grace := flag.Duration("shutdown-timeout", 2*time.Minute, "how long to wait for a clean power-off before killing the node")
	flag.Parse()

	cfg := launch.Config{Name: "node0", Image: *image, MemoryMiB: *memory, CPUs: *cpus}
	if err := run(cfg, *tpm, *grace); err != nil {
		fmt.Fprintf(os.Stderr, "launch-cluster: %v\n", err)
		os.Exit(1)
	}
}

// run boots the node and follows it until it powers off or the user stops
// it.
func run(cfg launch.Config, tpm bool, grace time.Duration) error {
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []launch.Option{launch.WithConsoleCopy(os.Stdout)}
	if tpm {
		opts = append(opts, launch.WithTPM())
	}
	n, err := launch.Launch(interrupted, cfg, opts...)
	if err != nil {
		return err
	}
	defer n.Close()
	say("node %s is booting from %s (console below; Ctrl-C powers it down)", cfg.Name, cfg.Image)

	select {
	case <-n.Done():
		return n.Wait(context.Background())
	case <-interrupted.Done():
	}
	return powerdown(n, grace)
}

// powerdown presses the node's power button and waits for qemu to exit,
// killing it after grace or on a second interrupt.
func powerdown(n *launch.Node, grace time.Duration) error {
	again, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("powering node %s down (up to %v; Ctrl-C again kills it)", n.Name(), grace)

	ctx, cancel := context.WithTimeout(again, grace)
	defer cancel()
	err := n.Powerdown(ctx)
	if err == nil {
		err = n.Wait(ctx)
	}
	switch {
	case err == nil:
		say("node %s powered off", n.Name())
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("node %s did not power off within %v", n.Name(), grace)
	case again.Err() != nil:
		err = fmt.Errorf("interrupted again while node %s powered down", n.Name())
	default:
		select {
		case <-n.Done():
			// qemu exited, but not cleanly.
			return err
		default:
		}
	}
	// An unclean end: kill the node, and say so in the exit status.
	if cerr := n.Close(); cerr != nil {
		return errors.Join(err, cerr)
	}
	return fmt.Errorf("%w; killed it", err)
}

// say tells the person at the terminal what happens, apart from the
// node's console.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "launch-cluster: "+format+"\n", args...)
}
