// Package evdev reads Linux input devices (/dev/input/event*): it finds
// devices by name and waits for key presses on them. PID 1 uses it to hear
// the ACPI power button, which the kernel's button driver reports as the
// input device "Power Button" sending KEY_POWER.
//
//	/sys/class/input/eventN/device/name ──FindByName──▶ "eventN"
//	/dev/input/eventN ──Open, read──▶ struct input_event ──ParseEvent──▶ Event
//	                                                            │
//	                      Device.WaitKeyPress returns on a press of its key
//
// Reading needs the evdev module (or CONFIG_INPUT_EVDEV=y): without it the
// devices exist in sysfs but have no eventN node.
package evdev

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cairn.dev/cairn/pkg/readcancel"
)

// Event types and codes from linux/input-event-codes.h that Cairn uses.
const (
	EvSyn    = 0x00
	EvKey    = 0x01
	KeyPower = 116
)

// Key event values.
const (
	KeyReleased = 0
	KeyPressed  = 1
	KeyRepeated = 2
)

// EventSize is the size of struct input_event on this machine: a struct
// timeval of two longs, then u16 type, u16 code and s32 value.
const EventSize = 2*bits.UintSize/8 + 8

// An Event is one struct input_event.
type Event struct {
	// Time is the event's timestamp, by default on CLOCK_MONOTONIC.
	Time  time.Duration
	Type  uint16
	Code  uint16
	Value int32
}

// ParseEvent decodes one struct input_event, as this machine lays it out,
// from the start of b.
func ParseEvent(b []byte) (Event, error) {
	return parseEvent(b, bits.UintSize/8)
}

// parseEvent decodes a struct input_event whose longs are long bytes.
func parseEvent(b []byte, long int) (Event, error) {
	size := 2*long + 8
	if len(b) < size {
		return Event{}, fmt.Errorf("input event needs %d bytes, got %d", size, len(b))
	}
	word := func(b []byte) int64 {
		if long == 8 {
			return int64(binary.NativeEndian.Uint64(b))
		}
		return int64(int32(binary.NativeEndian.Uint32(b)))
	}
	sec, usec := word(b), word(b[long:])
	b = b[2*long:]
	return Event{
		Time:  time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond,
		Type:  binary.NativeEndian.Uint16(b),
		Code:  binary.NativeEndian.Uint16(b[2:]),
		Value: int32(binary.NativeEndian.Uint32(b[4:])),
	}, nil
}

// FindByName returns the event nodes ("event3") of the input devices
// under classDir (normally /sys/class/input) whose name is name.
func FindByName(classDir, name string) ([]string, error) {
	entries, err := os.ReadDir(classDir)
	if err != nil {
		return nil, fmt.Errorf("when listing input devices: %w", err)
	}
	var nodes []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "event") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(classDir, e.Name(), "device", "name"))
		if err != nil {
			continue // gone meanwhile, or not a device with a name
		}
		if strings.TrimSpace(string(b)) == name {
			nodes = append(nodes, e.Name())
		}
	}
	return nodes, nil
}

// A Device is an open input device.
type Device struct {
	// Path is where the device was opened, "/dev/input/event3".
	Path string
	f    *os.File
}

// Open opens the input device at path for reading. Events that happen from
// then on are queued by the kernel until read, so opening early misses
// nothing that happens while the reader gets ready.
func Open(path string) (*Device, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("when opening input device: %w", err)
	}
	d, err := newDevice(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// newDevice wraps an open file; it must support poll, so that a blocked
// read can be interrupted.
func newDevice(path string, f *os.File) (*Device, error) {
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("input device %s cannot be polled: %w", path, err)
	}
	return &Device{Path: path, f: f}, nil
}

// Close closes the device.
func (d *Device) Close() error {
	return d.f.Close()
}

// WaitKeyPress reads events until the key code is pressed, and returns nil
// then. Releases and autorepeats do not count. It returns ctx.Err() once
// ctx is done, leaving the device usable for another call, and an error
// if the device cannot be read.
func (d *Device) WaitKeyPress(ctx context.Context, code uint16) error {
	release, err := readcancel.Bind(ctx, d.f)
	if err != nil {
		return fmt.Errorf("when reading input device: %w", err)
	}
	defer release()
	buf := make([]byte, 64*EventSize)
	for {
		n, err := d.f.Read(buf)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("when reading input device: %w", err)
		}
		if n%EventSize != 0 {
			// The kernel only hands out whole events.
			return fmt.Errorf("read %d bytes from input device, not a multiple of %d", n, EventSize)
		}
		for b := buf[:n]; len(b) > 0; b = b[EventSize:] {
			ev, err := ParseEvent(b)
			if err != nil {
				return err
			}
			if ev.Type == EvKey && ev.Code == code && ev.Value == KeyPressed {
				return nil
			}
		}
	}
}
