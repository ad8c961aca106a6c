package acpievent

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// genlHeaderSize is the size of struct genlmsghdr: u8 cmd, u8 version,
// u16 reserved.
const genlHeaderSize = 4

// A message is one netlink message of a datagram.
type message struct {
	typ     uint16
	payload []byte
}

// align rounds n up to netlink's 4-byte alignment.
func align(n int) int { return (n + 3) &^ 3 }

// parseMessages splits a netlink datagram into its messages. An error
// message from the kernel becomes an error.
func parseMessages(b []byte) ([]message, error) {
	var msgs []message
	for len(b) > 0 {
		if len(b) < unix.SizeofNlMsghdr {
			return nil, fmt.Errorf("netlink message header needs %d bytes, got %d", unix.SizeofNlMsghdr, len(b))
		}
		n := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		if n < unix.SizeofNlMsghdr || n > len(b) {
			return nil, fmt.Errorf("netlink message of %d bytes in %d", n, len(b))
		}
		payload := b[unix.SizeofNlMsghdr:n]
		if typ == unix.NLMSG_ERROR {
			if len(payload) < 4 {
				return nil, fmt.Errorf("short netlink error message")
			}
			if code := int32(binary.NativeEndian.Uint32(payload)); code != 0 {
				return nil, fmt.Errorf("netlink: %w", unix.Errno(-code))
			}
		} else {
			msgs = append(msgs, message{typ: typ, payload: payload})
		}
		b = b[min(align(n), len(b)):]
	}
	return msgs, nil
}

// parseAttrs reads a run of netlink attributes, keyed by type without the
// nested and byte-order flags. A later attribute of a type replaces an
// earlier one.
func parseAttrs(b []byte) (map[uint16][]byte, error) {
	attrs := make(map[uint16][]byte)
	for len(b) >= unix.SizeofNlAttr {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if n < unix.SizeofNlAttr || n > len(b) {
			return nil, fmt.Errorf("netlink attribute of %d bytes in %d", n, len(b))
		}
		attrs[typ] = b[unix.SizeofNlAttr:n]
		b = b[min(align(n), len(b)):]
	}
	return attrs, nil
}

// genlAttrs returns the attributes of a generic netlink message's payload,
// after its 4-byte genlmsghdr.
func genlAttrs(payload []byte) (map[uint16][]byte, error) {
	if len(payload) < genlHeaderSize {
		return nil, fmt.Errorf("generic netlink header needs %d bytes, got %d", genlHeaderSize, len(payload))
	}
	return parseAttrs(payload[genlHeaderSize:])
}

// familyRequest builds the CTRL_CMD_GETFAMILY request for name.
func familyRequest(name string) []byte {
	attrLen := unix.SizeofNlAttr + len(name) + 1
	n := unix.SizeofNlMsghdr + genlHeaderSize + align(attrLen)
	b := make([]byte, n)
	binary.NativeEndian.PutUint32(b[0:], uint32(n))
	binary.NativeEndian.PutUint16(b[4:], unix.GENL_ID_CTRL)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(b[8:], 1) // sequence number
	b[16] = unix.CTRL_CMD_GETFAMILY
	b[17] = 1 // version
	a := b[unix.SizeofNlMsghdr+genlHeaderSize:]
	binary.NativeEndian.PutUint16(a[0:], uint16(attrLen))
	binary.NativeEndian.PutUint16(a[2:], unix.CTRL_ATTR_FAMILY_NAME)
	copy(a[unix.SizeofNlAttr:], name)
	return b
}

// parseFamily reads the controller's answer to familyRequest: the family's
// ID and the ID of its multicast group named group.
func parseFamily(datagram []byte, group string) (family uint16, groupID uint32, err error) {
	msgs, err := parseMessages(datagram)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range msgs {
		if m.typ != unix.GENL_ID_CTRL {
			continue
		}
		attrs, err := genlAttrs(m.payload)
		if err != nil {
			return 0, 0, err
		}
		id := attrs[unix.CTRL_ATTR_FAMILY_ID]
		if len(id) < 2 {
			return 0, 0, fmt.Errorf("family answer without an ID")
		}
		groups, err := parseAttrs(attrs[unix.CTRL_ATTR_MCAST_GROUPS])
		if err != nil {
			return 0, 0, err
		}
		for _, g := range groups {
			ga, err := parseAttrs(g)
			if err != nil {
				return 0, 0, err
			}
			gid := ga[unix.CTRL_ATTR_MCAST_GRP_ID]
			if cString(ga[unix.CTRL_ATTR_MCAST_GRP_NAME]) == group && len(gid) >= 4 {
				return binary.NativeEndian.Uint16(id), binary.NativeEndian.Uint32(gid), nil
			}
		}
		return 0, 0, fmt.Errorf("family has no multicast group %q", group)
	}
	return 0, 0, fmt.Errorf("no family in the controller's answer")
}

// parseEvents returns the ACPI events in a datagram of family.
func parseEvents(datagram []byte, family uint16) ([]Event, error) {
	msgs, err := parseMessages(datagram)
	if err != nil {
		return nil, err
	}
	var events []Event
	for _, m := range msgs {
		if m.typ != family {
			continue
		}
		attrs, err := genlAttrs(m.payload)
		if err != nil {
			return nil, err
		}
		if a, ok := attrs[attrEvent]; ok {
			e, err := ParseEvent(a)
			if err != nil {
				return nil, err
			}
			events = append(events, e)
		}
	}
	return events, nil
}
