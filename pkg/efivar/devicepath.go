package efivar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"

	"github.com/google/uuid"

	"cairn.dev/cairn/pkg/gpt"
)

// ErrInvalid is wrapped by errors about device paths and load options that
// break the UEFI specification's encoding.
var ErrInvalid = errors.New("invalid UEFI encoding")

// Device path node types and subtypes (UEFI specification, section 10.3).
const (
	typeMedia        = 0x04
	subHardDrive     = 0x01
	subFilePath      = 0x04
	typeEnd          = 0x7f
	subEndEntire     = 0xff
	nodeHeaderLength = 4
	// hardDriveLength is the Hard Drive node's fixed length: the header,
	// partition number (4), start (8), size (8), signature (16), format
	// (1) and signature type (1).
	hardDriveLength = nodeHeaderLength + 4 + 8 + 8 + 16 + 1 + 1
)

// The partition formats and signature types of a Hard Drive node.
const (
	FormatMBR         = 0x01
	FormatGPT         = 0x02
	SignatureNone     = 0x00
	SignatureMBR      = 0x01
	SignatureGUID     = 0x02
	maxNodeDataLength = 0xffff - nodeHeaderLength
)

// DevicePath is one device path: its nodes, in order, without the End of
// Entire Device Path node that ends its encoding. A path of several
// instances keeps the End of Instance nodes between them as RawNodes.
type DevicePath []DevicePathNode

// DevicePathNode is one node of a device path: a HardDrive, a FilePath, or
// a RawNode for every other kind.
type DevicePathNode interface {
	// String is the node in the specification's text form.
	String() string
	// encode returns the node's type, subtype and data after the header.
	encode() (typ, sub uint8, data []byte)
}

// HardDrive is a Hard Drive Media device path node: a partition of a disk,
// named by its place on the disk and its signature. A path that starts
// with one is a short form that the firmware expands to the disk holding
// the partition.
type HardDrive struct {
	// PartitionNumber is the partition's entry in the partition table,
	// counting from 1.
	PartitionNumber uint32
	// PartitionStart and PartitionSize are the partition's first logical
	// block and its length in logical blocks.
	PartitionStart, PartitionSize uint64
	// Signature is the partition's signature as stored: for
	// SignatureGUID, the GPT partition GUID in the GPT's mixed-endian
	// byte order.
	Signature [16]byte
	// Format is FormatMBR or FormatGPT.
	Format uint8
	// SignatureType is SignatureNone, SignatureMBR or SignatureGUID.
	SignatureType uint8
}

// HardDriveFor returns the node of entry i (counting from 0) of t, a used
// GPT entry.
func HardDriveFor(t *gpt.Table, i int) (HardDrive, error) {
	if i < 0 || i >= len(t.Entries) {
		return HardDrive{}, fmt.Errorf("GPT has no entry %d (it has %d)", i, len(t.Entries))
	}
	p := t.Entries[i]
	if p.Type == uuid.Nil {
		return HardDrive{}, fmt.Errorf("GPT entry %d is unused", i)
	}
	return HardDrive{
		PartitionNumber: uint32(i + 1),
		PartitionStart:  p.FirstLBA,
		PartitionSize:   p.Sectors(),
		Signature:       gpt.GUIDToDisk(p.ID),
		Format:          FormatGPT,
		SignatureType:   SignatureGUID,
	}, nil
}

// PartitionGUID returns the signature as a GUID, for SignatureGUID.
func (h HardDrive) PartitionGUID() uuid.UUID { return gpt.GUIDFromDisk(h.Signature[:]) }

func (h HardDrive) encode() (uint8, uint8, []byte) {
	d := make([]byte, hardDriveLength-nodeHeaderLength)
	le := binary.LittleEndian
	le.PutUint32(d[0:], h.PartitionNumber)
	le.PutUint64(d[4:], h.PartitionStart)
	le.PutUint64(d[12:], h.PartitionSize)
	copy(d[20:], h.Signature[:])
	d[36], d[37] = h.Format, h.SignatureType
	return typeMedia, subHardDrive, d
}

// String is HD(number,GPT,guid,0xstart,0xsize), or with MBR and the
// 32-bit disk signature, or with the format and signature type as numbers
// when they are neither.
func (h HardDrive) String() string {
	var format, sig string
	switch {
	case h.Format == FormatGPT && h.SignatureType == SignatureGUID:
		format, sig = "GPT", h.PartitionGUID().String()
	case h.Format == FormatMBR && h.SignatureType == SignatureMBR:
		format, sig = "MBR", fmt.Sprintf("0x%08x", binary.LittleEndian.Uint32(h.Signature[:]))
	default:
		format, sig = fmt.Sprintf("%d", h.Format), fmt.Sprintf("%d,%x", h.SignatureType, h.Signature)
	}
	return fmt.Sprintf("HD(%d,%s,%s,0x%x,0x%x)", h.PartitionNumber, format, sig, h.PartitionStart, h.PartitionSize)
}

// FilePath is a File Path Media device path node: a file on the file
// system of the partition the path names before it.
type FilePath struct {
	// Path is the file's path with backslashes, \EFI\cairn\system-b.efi.
	Path string
}

func (f FilePath) encode() (uint8, uint8, []byte) {
	return typeMedia, subFilePath, utf16z(f.Path)
}

// String is the path itself, as in the specification's text form.
func (f FilePath) String() string { return f.Path }

// RawNode is any other device path node, kept as it was read.
type RawNode struct {
	Type, SubType uint8
	// Data is what follows the node's 4-byte header.
	Data []byte
}

func (r RawNode) encode() (uint8, uint8, []byte) { return r.Type, r.SubType, r.Data }

// String is Path(type,subtype,hex data), the specification's text form of
// a node it has no name for.
func (r RawNode) String() string {
	return fmt.Sprintf("Path(%d,%d,%X)", r.Type, r.SubType, r.Data)
}

// ESPFile returns the short-form device path of a file on the ESP, entry
// i of t: its Hard Drive node, then a File Path node. file is a path on
// the ESP, with slashes or backslashes (EFI/cairn/system-b.efi); the node
// holds it absolute, with backslashes.
func ESPFile(t *gpt.Table, i int, file string) (DevicePath, error) {
	hd, err := HardDriveFor(t, i)
	if err != nil {
		return nil, err
	}
	p := strings.ReplaceAll(file, "/", `\`)
	if !strings.HasPrefix(p, `\`) {
		p = `\` + p
	}
	return DevicePath{hd, FilePath{Path: p}}, nil
}

// Marshal encodes the path and its End of Entire Device Path node.
func (p DevicePath) Marshal() ([]byte, error) {
	var b []byte
	for i, n := range p {
		typ, sub, data := n.encode()
		if typ == typeEnd && sub == subEndEntire {
			return nil, fmt.Errorf("%w: device path node %d ends the path", ErrInvalid, i)
		}
		if f, ok := n.(FilePath); ok && strings.ContainsRune(f.Path, 0) {
			return nil, fmt.Errorf("%w: file path %q holds a NUL", ErrInvalid, f.Path)
		}
		if len(data) > maxNodeDataLength {
			return nil, fmt.Errorf("%w: device path node %d holds %d bytes, more than a node can", ErrInvalid, i, len(data))
		}
		b = append(b, typ, sub)
		b = binary.LittleEndian.AppendUint16(b, uint16(nodeHeaderLength+len(data)))
		b = append(b, data...)
	}
	return append(b, typeEnd, subEndEntire, nodeHeaderLength, 0), nil
}

// Equal reports whether p and q encode to the same bytes, which is what
// the firmware compares.
func (p DevicePath) Equal(q DevicePath) bool {
	a, aerr := p.Marshal()
	b, berr := q.Marshal()
	return aerr == nil && berr == nil && bytes.Equal(a, b)
}

// String is the path in the specification's text form, nodes separated by
// slashes: HD(1,GPT,<guid>,0x800,0x80000)/\EFI\cairn\system-b.efi.
func (p DevicePath) String() string {
	parts := make([]string, len(p))
	for i, n := range p {
		parts[i] = n.String()
	}
	return strings.Join(parts, "/")
}

// ParseDevicePath decodes a device path up to and including its End of
// Entire Device Path node, and returns what follows it.
func ParseDevicePath(b []byte) (DevicePath, []byte, error) {
	var p DevicePath
	for off := 0; ; {
		if len(b)-off < nodeHeaderLength {
			return nil, nil, fmt.Errorf("%w: device path ends at byte %d without an end node", ErrInvalid, off)
		}
		typ, sub := b[off], b[off+1]
		length := int(binary.LittleEndian.Uint16(b[off+2:]))
		if length < nodeHeaderLength || length > len(b)-off {
			return nil, nil, fmt.Errorf("%w: device path node at byte %d is %d bytes long, in %d bytes left",
				ErrInvalid, off, length, len(b)-off)
		}
		data := b[off+nodeHeaderLength : off+length]
		off += length
		if typ == typeEnd && sub == subEndEntire {
			if len(data) != 0 {
				return nil, nil, fmt.Errorf("%w: end node of %d bytes", ErrInvalid, length)
			}
			return p, b[off:], nil
		}
		n, err := parseNode(typ, sub, data)
		if err != nil {
			return nil, nil, fmt.Errorf("device path node %d: %w", len(p), err)
		}
		p = append(p, n)
	}
}

// parseNode decodes a node's data as its type and subtype say.
func parseNode(typ, sub uint8, data []byte) (DevicePathNode, error) {
	switch {
	case typ == typeMedia && sub == subHardDrive:
		if len(data) != hardDriveLength-nodeHeaderLength {
			return nil, fmt.Errorf("%w: Hard Drive node is %d bytes long, not %d",
				ErrInvalid, len(data)+nodeHeaderLength, hardDriveLength)
		}
		le := binary.LittleEndian
		h := HardDrive{
			PartitionNumber: le.Uint32(data[0:]),
			PartitionStart:  le.Uint64(data[4:]),
			PartitionSize:   le.Uint64(data[12:]),
			Format:          data[36],
			SignatureType:   data[37],
		}
		copy(h.Signature[:], data[20:36])
		return h, nil
	case typ == typeMedia && sub == subFilePath:
		s, err := fromUTF16z(data)
		if err != nil {
			return nil, fmt.Errorf("file path node: %w", err)
		}
		return FilePath{Path: s}, nil
	default:
		return RawNode{Type: typ, SubType: sub, Data: bytes.Clone(data)}, nil
	}
}

// utf16z encodes s as NUL-terminated UTF-16LE.
func utf16z(s string) []byte {
	units := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2*len(units)+2)
	for _, u := range units {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return append(b, 0, 0)
}

// fromUTF16z decodes NUL-terminated UTF-16LE, which must fill b: the text
// ends at its NUL, and anything after it is an error.
func fromUTF16z(b []byte) (string, error) {
	if len(b)%2 != 0 {
		return "", fmt.Errorf("%w: UTF-16 text of odd length %d", ErrInvalid, len(b))
	}
	units := make([]uint16, 0, len(b)/2)
	for i := 0; i < len(b); i += 2 {
		u := binary.LittleEndian.Uint16(b[i:])
		if u == 0 {
			if i+2 != len(b) {
				return "", fmt.Errorf("%w: UTF-16 text has %d bytes after its NUL", ErrInvalid, len(b)-i-2)
			}
			return string(utf16.Decode(units)), nil
		}
		units = append(units, u)
	}
	return "", fmt.Errorf("%w: UTF-16 text without its NUL", ErrInvalid)
}
