// Package acpievent receives the ACPI events the kernel multicasts over
// generic netlink: power and sleep buttons, lid switches, AC adapters.
//
// The kernel's ACPI drivers report these twice: as input events (read
// through evdev, see package evdev) and as messages to the generic netlink
// family "acpi_event". The second way needs no module beyond the driver of
// the device itself, so PID 1 falls back on it to hear the power button
// when no evdev node for the button exists.
//
//	ACPI button driver ──▶ genetlink family "acpi_event"
//	                        multicast group "acpi_mc_group"
//	                              │  nlmsghdr, genlmsghdr, attribute
//	                              ▼  ACPI_GENL_ATTR_EVENT
//	Conn.Receive ◀── struct acpi_genl_event ──▶ Event{"button/power",
//	                                                  "LNXPWRBN:00", ...}
package acpievent

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The family, group, command and attribute of ACPI events
// (drivers/acpi/event.c).
const (
	familyName       = "acpi_event"
	groupName        = "acpi_mc_group"
	attrEvent        = 1
	classPowerButton = "button/power"
)

// eventSize is the size of struct acpi_genl_event: char device_class[20],
// char bus_id[15], one byte of padding, u32 type, u32 data.
const eventSize = 44

// An Event is one ACPI event.
type Event struct {
	// DeviceClass says what sent it: "button/power", "button/lid", "ac_adapter".
	DeviceClass string
	// BusID names the device ("LNXPWRBN:00", "PNP0C0C:00").
	BusID string
	// Type is the ACPI notification (0x80 for a button press).
	Type uint32
	// Data is event specific; for buttons, a press counter.
	Data uint32
}

// IsPowerButton reports whether e is a press of a power button.
func (e Event) IsPowerButton() bool {
	return e.DeviceClass == classPowerButton
}

// ParseEvent decodes a struct acpi_genl_event.
func ParseEvent(b []byte) (Event, error) {
	if len(b) < eventSize {
		return Event{}, fmt.Errorf("acpi event needs %d bytes, got %d", eventSize, len(b))
	}
	return Event{
		DeviceClass: cString(b[0:20]),
		BusID:       cString(b[20:35]),
		Type:        binary.NativeEndian.Uint32(b[36:]),
		Data:        binary.NativeEndian.Uint32(b[40:]),
	}, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
