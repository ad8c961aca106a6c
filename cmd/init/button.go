package main

import (
	"context"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/evdev"
	"cairn.dev/cairn/pkg/supervisor"
)

// powerButtonName is the name the kernel's ACPI button driver gives the
// input device of the power button (both the fixed-feature button,
// LNXPWRBN, and the control-method one, PNP0C0C).
const powerButtonName = "Power Button"

// power is the runnable that turns the ACPI power button and the signals
// PID 1 forwards into a shutdown request.
type power struct {
	// signals carries SIGTERM (poweroff) and SIGINT (reboot) as PID 1
	// forwards them.
	signals <-chan os.Signal
	// request asks for the node to stop; calls after the first are no-ops.
	request func(action)
	// inputClass and inputDev are /sys/class/input and /dev/input.
	inputClass, inputDev string
}

// run starts a child reading each power button, signals healthy, and waits
// for a signal. A machine without a power button is no error: only the
// signals can stop it then.
func (p *power) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	nodes, err := evdev.FindByName(p.inputClass, powerButtonName)
	if err != nil {
		log.Warningf("no power button: %v", err)
	} else if len(nodes) == 0 {
		log.Warningf("no power button found; only SIGTERM and SIGINT can stop the node")
	}
	for _, n := range nodes {
		if err := supervisor.Run(ctx, n, p.button(filepath.Join(p.inputDev, n))); err != nil {
			return err
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case s := <-p.signals:
			log.Infof("received %v", s)
			p.request(signalAction(s))
		}
	}
}

// button returns a runnable that asks for a poweroff whenever the power
// button at path is pressed.
func (p *power) button(path string) supervisor.Runnable {
	return func(ctx context.Context) error {
		supervisor.Logger(ctx).Infof("watching power button %s", path)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			if err := evdev.WaitKeyPress(ctx, path, evdev.KeyPower); err != nil {
				return err
			}
			supervisor.Logger(ctx).Infof("power button pressed")
			p.request(poweroff)
		}
	}
}
