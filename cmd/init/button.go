package main

import (
	"context"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/acpievent"
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
	// acpiFallback listens for ACPI power button events over netlink when
	// there is no input device for the button (evdev missing).
	acpiFallback bool
}

// run starts a child reading each power button, signals healthy, and waits
// for a signal. Power buttons are read as input devices; without evdev
// nodes for them, a child listens for ACPI events over netlink instead.
func (p *power) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	nodes, err := evdev.FindByName(p.inputClass, powerButtonName)
	if err != nil {
		log.Warningf("when looking for power button input devices: %v", err)
	}
	for _, n := range nodes {
		if err := supervisor.Run(ctx, n, p.button(filepath.Join(p.inputDev, n))); err != nil {
			return err
		}
	}
	if len(nodes) == 0 && p.acpiFallback {
		log.Infof("no power button input device; listening for ACPI events instead")
		if err := supervisor.Run(ctx, "acpi", p.acpi); err != nil {
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

// acpi asks for a poweroff whenever the kernel reports a power button
// press as an ACPI event. A kernel without ACPI events is no error: the
// runnable then says so and waits, as nothing will ever come.
func (p *power) acpi(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	c, err := acpievent.Dial()
	if err != nil {
		log.Warningf("no ACPI events (%v); only SIGTERM and SIGINT can stop the node", err)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	defer c.Close()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		events, err := c.Receive(ctx)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.IsPowerButton() {
				log.Infof("power button pressed (ACPI %s)", e.BusID)
				p.request(poweroff)
			}
		}
	}
}
