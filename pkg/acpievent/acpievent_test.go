package acpievent

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// attr lays out one netlink attribute, padded.
func attr(typ uint16, payload []byte) []byte {
	b := make([]byte, align(unix.SizeofNlAttr+len(payload)))
	binary.NativeEndian.PutUint16(b, uint16(unix.SizeofNlAttr+len(payload)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[unix.SizeofNlAttr:], payload)
	return b
}

// genlMessage lays out a generic netlink message of type typ whose
// attributes are attrs.
func genlMessage(typ uint16, attrs ...[]byte) []byte {
	body := []byte{1, 1, 0, 0} // cmd, version, reserved
	for _, a := range attrs {
		body = append(body, a...)
	}
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(b, uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	return append(b, body...)
}

func u16(v uint16) []byte { return binary.NativeEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func rawEvent(class, bus string, typ, data uint32) []byte {
	b := make([]byte, eventSize)
	copy(b[0:20], class)
	copy(b[20:35], bus)
	binary.NativeEndian.PutUint32(b[36:], typ)
	binary.NativeEndian.PutUint32(b[40:], data)
	return b
}

func familyReply(family uint16, groups map[string]uint32) []byte {
	var nested []byte
	i := uint16(1)
	for name, id := range groups {
		g := append(attr(unix.CTRL_ATTR_MCAST_GRP_NAME, append([]byte(name), 0)), attr(unix.CTRL_ATTR_MCAST_GRP_ID, u32(id))...)
		nested = append(nested, attr(i|unix.NLA_F_NESTED, g)...)
		i++
	}
	return genlMessage(unix.GENL_ID_CTRL,
		attr(unix.CTRL_ATTR_FAMILY_NAME, []byte("acpi_event\x00")),
		attr(unix.CTRL_ATTR_FAMILY_ID, u16(family)),
		attr(unix.CTRL_ATTR_MCAST_GROUPS|unix.NLA_F_NESTED, nested))
}

func TestParseFamily(t *testing.T) {
	reply := familyReply(0x1a, map[string]uint32{"acpi_mc_group": 5})
	family, group, err := parseFamily(reply, groupName)
	if err != nil || family != 0x1a || group != 5 {
		t.Errorf("parseFamily = %#x, %d, %v, want 0x1a, 5, nil", family, group, err)
	}
	if _, _, err := parseFamily(familyReply(0x1a, map[string]uint32{"other": 3}), groupName); err == nil {
		t.Errorf("parseFamily(no such group) = nil error, want one")
	}
	// The kernel's answer when the family does not exist: ENOENT.
	nack := make([]byte, unix.SizeofNlMsghdr+4)
	binary.NativeEndian.PutUint32(nack, uint32(len(nack)))
	binary.NativeEndian.PutUint16(nack[4:], unix.NLMSG_ERROR)
	binary.NativeEndian.PutUint32(nack[unix.SizeofNlMsghdr:], uint32(0xffffffff-uint32(unix.ENOENT)+1))
	if _, _, err := parseFamily(nack, groupName); err == nil {
		t.Errorf("parseFamily(ENOENT) = nil error, want one")
	}
}

func TestParseEvents(t *testing.T) {
	d := append(genlMessage(0x1a, attr(attrEvent, rawEvent("button/power", "LNXPWRBN:00", 0x80, 1))),
		genlMessage(0x1b, attr(attrEvent, rawEvent("ignored", "x", 0, 0)))...)
	d = append(d, genlMessage(0x1a, attr(attrEvent, rawEvent("button/lid", "PNP0C0D:00", 0x80, 7)))...)
	got, err := parseEvents(d, 0x1a)
	if err != nil {
		t.Fatalf("parseEvents: %v", err)
	}
	want := []Event{
		{DeviceClass: "button/power", BusID: "LNXPWRBN:00", Type: 0x80, Data: 1},
		{DeviceClass: "button/lid", BusID: "PNP0C0D:00", Type: 0x80, Data: 7},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseEvents = %+v, want %+v", got, want)
	}
	if !got[0].IsPowerButton() || got[1].IsPowerButton() {
		t.Errorf("IsPowerButton of %+v = %v, %v, want true, false", got, got[0].IsPowerButton(), got[1].IsPowerButton())
	}
}

func TestParseRejects(t *testing.T) {
	for name, d := range map[string][]byte{
		"short header":      {1, 2, 3},
		"length too large":  append(u32(999), make([]byte, 12)...),
		"length too small":  append(u32(3), make([]byte, 12)...),
		"short event":       genlMessage(0x1a, attr(attrEvent, make([]byte, 10))),
		"short genl header": genlMessage(0x1a)[:unix.SizeofNlMsghdr+2],
	} {
		if name == "short genl header" {
			binary.NativeEndian.PutUint32(d, uint32(len(d)))
		}
		if _, err := parseEvents(d, 0x1a); err == nil {
			t.Errorf("parseEvents(%s) = nil error, want one", name)
		}
	}
}

func TestFamilyRequest(t *testing.T) {
	msgs, err := parseMessages(familyRequest(familyName))
	if err != nil || len(msgs) != 1 || msgs[0].typ != unix.GENL_ID_CTRL {
		t.Fatalf("parseMessages(familyRequest) = %+v, %v, want one controller message", msgs, err)
	}
	attrs, err := genlAttrs(msgs[0].payload)
	if err != nil {
		t.Fatal(err)
	}
	if got := cString(attrs[unix.CTRL_ATTR_FAMILY_NAME]); got != familyName {
		t.Errorf("requested family %q, want %q", got, familyName)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(familyReply(0x1a, map[string]uint32{"acpi_mc_group": 5}))
	f.Add(genlMessage(0x1a, attr(attrEvent, rawEvent("button/power", "LNXPWRBN:00", 0x80, 1))))
	f.Fuzz(func(t *testing.T, d []byte) {
		parseFamily(d, groupName)
		events, err := parseEvents(d, 0x1a)
		if err == nil {
			for _, e := range events {
				if len(e.DeviceClass) > 20 || len(e.BusID) > 15 {
					t.Errorf("parseEvents(%x) gave %+v, longer than the kernel's fields", d, e)
				}
			}
		}
	})
}

// TestReceiveCancel: a Receive waiting for events returns its context's
// error when the context ends, and the Conn then receives the next
// datagram of events under a new one. The datagrams come through a
// socket pair rather than the kernel's netlink socket.
func TestReceiveCancel(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{f: os.NewFile(uintptr(fds[0]), "acpi_event"), family: 0x1a}
	defer c.Close()
	defer unix.Close(fds[1])

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got, err := c.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive until its context ended = %v, %v, want context.DeadlineExceeded", got, err)
	}

	power := Event{DeviceClass: "button/power", BusID: "LNXPWRBN:00", Type: 0x80, Data: 1}
	go func() {
		time.Sleep(20 * time.Millisecond)
		unix.Write(fds[1], genlMessage(0x1a, attr(attrEvent, rawEvent(power.DeviceClass, power.BusID, power.Type, power.Data))))
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := c.Receive(ctx)
	if err != nil || len(got) != 1 || got[0] != power {
		t.Errorf("Receive after a cancelled one = %+v, %v, want [%+v]", got, err, power)
	}
}
