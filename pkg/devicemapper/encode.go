package devicemapper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Sizes and offsets of the kernel's version-4 ioctl structures, from the
// UAPI header linux/dm-ioctl.h. Everything is little-endian on the
// architectures Cairn runs on and naturally aligned, so the C layout has no
// hidden padding besides the explicit fields.
const (
	// HeaderSize is sizeof(struct dm_ioctl): the three version words and
	// seven more 32-bit fields, the last of them padding (40 bytes), the
	// 64-bit dev (48), the 128-byte name (176), the 129-byte uuid (305)
	// and a 7-byte tail that rounds the whole to a multiple of 8.
	HeaderSize = 312
	// specSize is sizeof(struct dm_target_spec): start and length (16),
	// status and next (8), the 16-byte target type.
	specSize = 40
	nameLen  = 128
	uuidLen  = 129
	typeLen  = 16

	offVersion     = 0
	offDataSize    = 12
	offDataStart   = 16
	offTargetCount = 20
	offOpenCount   = 24
	offFlags       = 28
	offEventNr     = 32
	offPadding     = 36
	offDev         = 40
	offName        = 48
	offUUID        = offName + nameLen // 176
	offData        = offUUID + uuidLen // 305

	// nameListNameOffset is where the name starts in a struct
	// dm_name_list: after the 64-bit dev and the 32-bit next.
	nameListNameOffset = 12
)

// The interface version this package speaks. The kernel accepts any
// request with the same major and a minor no greater than its own.
const (
	versionMajor = 4
	versionMinor = 0
	versionPatch = 0
)

// Flags of struct dm_ioctl that this package uses.
const (
	flagReadOnly        = 1 << 0
	flagSuspend         = 1 << 1
	flagStatusTable     = 1 << 4
	flagActivePresent   = 1 << 5
	flagInactivePresent = 1 << 6
	flagBufferFull      = 1 << 8
	flagSecureData      = 1 << 15
)

// ErrMalformed is wrapped by every error about a reply buffer the kernel
// (or a fuzzer) handed back that does not parse.
var ErrMalformed = errors.New("malformed device-mapper reply")

// header is struct dm_ioctl without its trailing payload.
type header struct {
	Version     [3]uint32
	DataSize    uint32
	DataStart   uint32
	TargetCount uint32
	OpenCount   int32
	Flags       uint32
	EventNr     uint32
	Dev         uint64
	Name        string
	UUID        string
}

// marshal writes h into the first HeaderSize bytes of b.
func (h *header) marshal(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("buffer of %d bytes is shorter than the header", len(b))
	}
	if len(h.Name) >= nameLen {
		return fmt.Errorf("device name of %d bytes is longer than %d", len(h.Name), nameLen-1)
	}
	if len(h.UUID) >= uuidLen {
		return fmt.Errorf("device uuid of %d bytes is longer than %d", len(h.UUID), uuidLen-1)
	}
	if bytes.IndexByte([]byte(h.Name), 0) >= 0 || bytes.IndexByte([]byte(h.UUID), 0) >= 0 {
		return errors.New("device name or uuid contains a NUL byte")
	}
	clear(b[:HeaderSize])
	le := binary.LittleEndian
	for i, v := range h.Version {
		le.PutUint32(b[offVersion+4*i:], v)
	}
	le.PutUint32(b[offDataSize:], h.DataSize)
	le.PutUint32(b[offDataStart:], h.DataStart)
	le.PutUint32(b[offTargetCount:], h.TargetCount)
	le.PutUint32(b[offOpenCount:], uint32(h.OpenCount))
	le.PutUint32(b[offFlags:], h.Flags)
	le.PutUint32(b[offEventNr:], h.EventNr)
	le.PutUint64(b[offDev:], h.Dev)
	copy(b[offName:offName+nameLen], h.Name)
	copy(b[offUUID:offUUID+uuidLen], h.UUID)
	return nil
}

// unmarshalHeader reads a struct dm_ioctl from the start of b.
func unmarshalHeader(b []byte) (header, error) {
	if len(b) < HeaderSize {
		return header{}, fmt.Errorf("%w: %d bytes, shorter than the header", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	var h header
	for i := range h.Version {
		h.Version[i] = le.Uint32(b[offVersion+4*i:])
	}
	h.DataSize = le.Uint32(b[offDataSize:])
	h.DataStart = le.Uint32(b[offDataStart:])
	h.TargetCount = le.Uint32(b[offTargetCount:])
	h.OpenCount = int32(le.Uint32(b[offOpenCount:]))
	h.Flags = le.Uint32(b[offFlags:])
	h.EventNr = le.Uint32(b[offEventNr:])
	h.Dev = le.Uint64(b[offDev:])
	h.Name = cString(b[offName : offName+nameLen])
	h.UUID = cString(b[offUUID : offUUID+uuidLen])
	return h, nil
}

// payload returns the reply's data area: from data_start to data_size,
// both checked against the buffer.
func (h *header) payload(b []byte) ([]byte, error) {
	start, end := uint64(h.DataStart), uint64(h.DataSize)
	if start < offData || start > end || end > uint64(len(b)) {
		return nil, fmt.Errorf("%w: data from %d to %d in a buffer of %d bytes",
			ErrMalformed, start, end, len(b))
	}
	return b[start:end], nil
}

// cString returns the bytes of b up to its first NUL, or all of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Target is one line of a device-mapper table: a range of the mapped
// device's sectors and the target that serves them.
type Target struct {
	// Start is the first sector (512 bytes) of the mapped device this
	// target serves.
	Start uint64
	// Length is the number of sectors it serves.
	Length uint64
	// Type is the target type, like "crypt" or "linear".
	Type string
	// Params is the target's parameter string in a table, or its status
	// line in a status reply. For crypt targets it holds the key: never
	// log it.
	Params string
}

// align8 rounds n up to a multiple of 8.
func align8(n int) int { return (n + 7) &^ 7 }

// encodeTargets lays out targets as a DM_TABLE_LOAD payload: each a
// struct dm_target_spec, then its NUL-terminated parameters, padded so that
// the next spec starts 8-aligned; next holds the distance from this spec
// to the next.
func encodeTargets(targets []Target) ([]byte, error) {
	var out []byte
	for i, t := range targets {
		rec, err := encodeSpec(t.Start, t.Length, t.Type, []byte(t.Params))
		if err != nil {
			return nil, fmt.Errorf("target %d: %w", i, err)
		}
		out = append(out, rec...)
	}
	return out, nil
}

// encodeSpec lays out one target spec with its parameters. The parameters
// are bytes, not a string, so that callers holding keys can wipe both
// their copy and the returned record.
func encodeSpec(start, length uint64, typ string, params []byte) ([]byte, error) {
	if typ == "" || len(typ) >= typeLen || strings.IndexByte(typ, 0) >= 0 {
		return nil, fmt.Errorf("type %q must be 1 to %d bytes without NUL", typ, typeLen-1)
	}
	if bytes.IndexByte(params, 0) >= 0 {
		return nil, errors.New("parameters contain a NUL byte")
	}
	le := binary.LittleEndian
	n := align8(specSize + len(params) + 1)
	rec := make([]byte, n)
	le.PutUint64(rec[0:], start)
	le.PutUint64(rec[8:], length)
	le.PutUint32(rec[16:], 0) // status: output only
	le.PutUint32(rec[20:], uint32(n))
	copy(rec[24:24+typeLen], typ)
	copy(rec[specSize:], params)
	return rec, nil
}

// parseTargets reads count target specs from a DM_TABLE_STATUS reply
// payload. There, unlike in requests, next is the offset of the following
// spec from the start of the payload; the parameters of a spec end at
// their NUL or at the next spec.
func parseTargets(data []byte, count uint32) ([]Target, error) {
	le := binary.LittleEndian
	var targets []Target
	off := 0
	for i := uint32(0); i < count; i++ {
		if off < 0 || off+specSize > len(data) {
			return nil, fmt.Errorf("%w: target %d at %d overruns %d bytes", ErrMalformed, i, off, len(data))
		}
		spec := data[off:]
		next := int(le.Uint32(spec[20:]))
		end := len(data)
		if i+1 < count {
			if next < off+specSize || next > len(data) {
				return nil, fmt.Errorf("%w: target %d points to the next at %d", ErrMalformed, i, next)
			}
			end = next
		}
		targets = append(targets, Target{
			Start:  le.Uint64(spec[0:]),
			Length: le.Uint64(spec[8:]),
			Type:   cString(spec[24 : 24+typeLen]),
			Params: cString(data[off+specSize : end]),
		})
		off = next
	}
	return targets, nil
}

// Device names one mapped device, as DM_LIST_DEVICES reports it.
type Device struct {
	// Name is the device's name under /dev/mapper.
	Name string
	// Dev is its device number, in the encoding of unix.Mkdev.
	Dev uint64
}

// parseNameList reads a DM_LIST_DEVICES reply payload: a chain of struct
// dm_name_list records, each with its dev, the offset of the next record
// from its own start (0 for the last) and its NUL-terminated name. Newer
// kernels put more fields after the name; they are skipped. A first record
// with dev 0 means there are no devices.
func parseNameList(data []byte) ([]Device, error) {
	le := binary.LittleEndian
	var devs []Device
	off := 0
	for {
		if off+nameListNameOffset > len(data) {
			return nil, fmt.Errorf("%w: name record at %d overruns %d bytes", ErrMalformed, off, len(data))
		}
		rec := data[off:]
		dev := le.Uint64(rec[0:])
		next := int(le.Uint32(rec[8:]))
		if dev == 0 && off == 0 {
			return nil, nil
		}
		end := len(rec)
		if next != 0 {
			if next <= nameListNameOffset || next > len(rec) {
				return nil, fmt.Errorf("%w: name record at %d points to the next at +%d", ErrMalformed, off, next)
			}
			end = next
		}
		name := rec[nameListNameOffset:end]
		if bytes.IndexByte(name, 0) < 0 {
			return nil, fmt.Errorf("%w: name record at %d has no terminated name", ErrMalformed, off)
		}
		devs = append(devs, Device{Name: cString(name), Dev: dev})
		if next == 0 {
			return devs, nil
		}
		off += next
	}
}
