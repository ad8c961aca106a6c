package main

import (
	"context"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/acpievent"
	"cairn.dev/cairn/pkg/evdev"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// powerButtonName is the name the kernel's ACPI button driver gives the
// input device of the power button (both the fixed-feature button,
// LNXPWRBN, and the control-method one, PNP0C0C).
const powerButtonName = "Power Button"

// powerButtons are where power button presses come from. The core opens
// them before the supervision tree starts: from then on the kernel queues
// presses for them, so that one made while the tree comes up is not lost.
type powerButtons struct {
	// devices are the input devices of the power buttons.
	devices []*evdev.Device
	// acpi receives ACPI events; it is only opened when there is no input
	// device for a power button (no evdev module), as the same press
	// arrives both ways.
	acpi *acpievent.Conn
}

// openPowerButtons opens every input device named powerButtonName under
// inputClass (/sys/class/input) and inputDev (/dev/input), or, if there is
// none and acpiFallback is set, a socket for ACPI events. What fails is
// logged; a machine without a power button can still be stopped by the
// signals PID 1 forwards.
func openPowerButtons(inputClass, inputDev string, acpiFallback bool, log logtree.LeveledLogger) *powerButtons {
	b := &powerButtons{}
	nodes, err := evdev.FindByName(inputClass, powerButtonName)
	if err != nil {
		log.Warningf("when looking for power button input devices: %v", err)
	}
	for _, n := range nodes {
		d, err := evdev.Open(filepath.Join(inputDev, n))
		if err != nil {
			log.Warningf("%v", err)
			continue
		}
		b.devices = append(b.devices, d)
	}
	if len(b.devices) > 0 || !acpiFallback {
		return b
	}
	log.Infof("no power button input device; listening for ACPI events instead")
	if b.acpi, err = acpievent.Dial(); err != nil {
		log.Warningf("no ACPI events either: %v", err)
	}
	return b
}

// Close closes every source.
func (b *powerButtons) Close() {
	for _, d := range b.devices {
		d.Close()
	}
	if b.acpi != nil {
		b.acpi.Close()
	}
}

// power is the runnable that turns power button presses and the signals
// PID 1 forwards into a shutdown request.
type power struct {
	// signals carries SIGTERM (poweroff) and SIGINT (reboot) as PID 1
	// forwards them.
	signals <-chan os.Signal
	// request asks for the node to stop; calls after the first are no-ops.
	request func(action)
	// buttons are the power buttons to watch.
	buttons *powerButtons
}

// run starts a child watching each power button, signals healthy, and
// waits for a signal.
func (p *power) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	for _, d := range p.buttons.devices {
		if err := supervisor.Run(ctx, filepath.Base(d.Path), p.button(d)); err != nil {
			return err
		}
	}
	if p.buttons.acpi != nil {
		if err := supervisor.Run(ctx, "acpi", p.acpi(p.buttons.acpi)); err != nil {
			return err
		}
	}
	if len(p.buttons.devices) == 0 && p.buttons.acpi == nil {
		log.Warningf("no power button; only SIGTERM and SIGINT can stop the node")
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
// button d is pressed.
func (p *power) button(d *evdev.Device) supervisor.Runnable {
	return func(ctx context.Context) error {
		supervisor.Logger(ctx).Infof("watching power button %s", d.Path)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			if err := d.WaitKeyPress(ctx, evdev.KeyPower); err != nil {
				return err
			}
			supervisor.Logger(ctx).Infof("power button pressed")
			p.request(poweroff)
		}
	}
}

// acpi returns a runnable that asks for a poweroff whenever the kernel
// reports a power button press as an ACPI event on c.
func (p *power) acpi(c *acpievent.Conn) supervisor.Runnable {
	return func(ctx context.Context) error {
		supervisor.Logger(ctx).Infof("watching ACPI events for the power button")
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			events, err := c.Receive(ctx)
			if err != nil {
				return err
			}
			for _, e := range events {
				if e.IsPowerButton() {
					supervisor.Logger(ctx).Infof("power button pressed (ACPI %s)", e.BusID)
					p.request(poweroff)
				}
			}
		}
	}
}
