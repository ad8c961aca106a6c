package sntp

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Port is the UDP port NTP servers listen on.
const Port = 123

// packetSize is the size of an NTP packet without extension fields or a
// MAC, which is all that SNTP sends. Longer packets are read up to here.
const packetSize = 48

// Leap is the leap indicator of an answer: a leap second announced for the
// end of the day, or a server whose clock is not synchronized.
type Leap uint8

const (
	// LeapNone: no leap second is due.
	LeapNone Leap = 0
	// LeapInsert: the last minute of the day has 61 seconds.
	LeapInsert Leap = 1
	// LeapDelete: the last minute of the day has 59 seconds.
	LeapDelete Leap = 2
	// LeapNotSync: the server's clock is not synchronized (the alarm
	// condition); clients must not use its time.
	LeapNotSync Leap = 3
)

func (l Leap) String() string {
	switch l {
	case LeapNone:
		return "no leap second"
	case LeapInsert:
		return "leap second to insert"
	case LeapDelete:
		return "leap second to delete"
	case LeapNotSync:
		return "not synchronized"
	}
	return fmt.Sprintf("leap indicator %d", uint8(l))
}

// mode is the association mode of a packet; SNTP uses two.
type mode uint8

const (
	modeClient mode = 3
	modeServer mode = 4
)

// maxStratum is the highest stratum of a synchronized server; 16 means
// unsynchronized, and 0 marks a kiss-o'-death packet.
const maxStratum = 15

// ntpTime is an NTP timestamp: seconds since 1900 in the high 32 bits, a
// binary fraction of a second in the low 32. Zero means "no time".
type ntpTime uint64

// ntpEpochOffset is the number of seconds from 1900 to 1970.
const ntpEpochOffset = 2208988800

// toNTP converts t to an NTP timestamp, in the era (2^32 seconds) it
// falls in; the era itself is not sent.
func toNTP(t time.Time) ntpTime {
	secs := uint64(t.Unix() + ntpEpochOffset)
	frac := (uint64(t.Nanosecond())<<32 + 5e8) / 1e9
	return ntpTime(secs<<32 + frac)
}

// time converts the timestamp to a time between 1968 and 2104 (RFC 4330,
// section 3): a clear top bit of the seconds means after the first wrap,
// in February 2036.
func (n ntpTime) time() time.Time {
	secs := int64(n >> 32)
	if secs&0x80000000 == 0 {
		secs += 1 << 32
	}
	nanos := (uint64(n&0xffffffff)*1e9 + 1<<31) >> 32
	return time.Unix(secs-ntpEpochOffset, int64(nanos))
}

// shortDuration converts NTP's short format, 16.16 fixed-point seconds, to
// a Duration.
func shortDuration(v uint32) time.Duration {
	return time.Duration(uint64(v) * uint64(time.Second) >> 16)
}

// packet is the 48-byte header of an NTP packet (RFC 5905, figure 8).
type packet struct {
	leap           Leap
	version        uint8
	mode           mode
	stratum        uint8
	poll           int8
	precision      int8
	rootDelay      uint32
	rootDispersion uint32
	referenceID    [4]byte
	reference      ntpTime
	origin         ntpTime
	receive        ntpTime
	transmit       ntpTime
}

// marshal returns the packet's 48 bytes.
func (p *packet) marshal() []byte {
	b := make([]byte, packetSize)
	b[0] = byte(p.leap&3)<<6 | (p.version&7)<<3 | byte(p.mode&7)
	b[1] = p.stratum
	b[2] = byte(p.poll)
	b[3] = byte(p.precision)
	binary.BigEndian.PutUint32(b[4:], p.rootDelay)
	binary.BigEndian.PutUint32(b[8:], p.rootDispersion)
	copy(b[12:16], p.referenceID[:])
	binary.BigEndian.PutUint64(b[16:], uint64(p.reference))
	binary.BigEndian.PutUint64(b[24:], uint64(p.origin))
	binary.BigEndian.PutUint64(b[32:], uint64(p.receive))
	binary.BigEndian.PutUint64(b[40:], uint64(p.transmit))
	return b
}

// parsePacket reads the header of an NTP packet from b. Extension fields
// and a MAC after it are ignored. Any 48 bytes parse; what they mean is
// for the caller to check.
func parsePacket(b []byte) (*packet, error) {
	if len(b) < packetSize {
		return nil, fmt.Errorf("packet of %d bytes, shorter than the %d of an NTP header", len(b), packetSize)
	}
	p := &packet{
		leap:           Leap(b[0] >> 6),
		version:        (b[0] >> 3) & 7,
		mode:           mode(b[0] & 7),
		stratum:        b[1],
		poll:           int8(b[2]),
		precision:      int8(b[3]),
		rootDelay:      binary.BigEndian.Uint32(b[4:]),
		rootDispersion: binary.BigEndian.Uint32(b[8:]),
		reference:      ntpTime(binary.BigEndian.Uint64(b[16:])),
		origin:         ntpTime(binary.BigEndian.Uint64(b[24:])),
		receive:        ntpTime(binary.BigEndian.Uint64(b[32:])),
		transmit:       ntpTime(binary.BigEndian.Uint64(b[40:])),
	}
	copy(p.referenceID[:], b[12:16])
	return p, nil
}
