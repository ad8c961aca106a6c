package efivar

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// LoadOptionActive marks a load option the boot manager may boot
// (UEFI specification, section 3.1.3).
const LoadOptionActive uint32 = 0x00000001

// LoadOption is an EFI_LOAD_OPTION, the content of a Boot#### variable:
// what the boot manager shows and what it loads.
type LoadOption struct {
	// Attributes are the option's LOAD_OPTION_* bits; LoadOptionActive
	// for one the firmware boots.
	Attributes uint32
	// Description is the option's name in the firmware's boot menu.
	Description string
	// FilePath is the device path of the image to load; its first
	// instance is the one booted.
	FilePath DevicePath
	// MoreFilePaths are the encoded device paths that may follow the
	// first in the option's path list, whose use is up to each OS; kept
	// as read, nil for none.
	MoreFilePaths []byte
	// OptionalData is handed to the loaded image; nil for none.
	OptionalData []byte
}

// Marshal encodes the option: attributes (4 bytes), the length of the
// device path (2 bytes), the description as NUL-terminated UTF-16LE, the
// device path, then the optional data, all little-endian.
func (o *LoadOption) Marshal() ([]byte, error) {
	if strings.ContainsRune(o.Description, 0) {
		return nil, fmt.Errorf("%w: load option description %q holds a NUL", ErrInvalid, o.Description)
	}
	path, err := o.FilePath.Marshal()
	if err != nil {
		return nil, fmt.Errorf("when encoding load option %q: %w", o.Description, err)
	}
	path = append(path, o.MoreFilePaths...)
	if len(path) > 0xffff {
		return nil, fmt.Errorf("%w: load option %q has a device path of %d bytes, more than its length field holds",
			ErrInvalid, o.Description, len(path))
	}
	b := binary.LittleEndian.AppendUint32(nil, o.Attributes)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(path)))
	b = append(b, utf16z(o.Description)...)
	b = append(b, path...)
	return append(b, o.OptionalData...), nil
}

// ParseLoadOption decodes an EFI_LOAD_OPTION. Its first device path must
// end within the length the option states; what follows it up to that
// length is MoreFilePaths.
func ParseLoadOption(b []byte) (*LoadOption, error) {
	if len(b) < 6 {
		return nil, fmt.Errorf("%w: load option of %d bytes is shorter than its header", ErrInvalid, len(b))
	}
	o := &LoadOption{Attributes: binary.LittleEndian.Uint32(b)}
	pathLen := int(binary.LittleEndian.Uint16(b[4:]))
	rest := b[6:]
	end := -1
	for i := 0; i+1 < len(rest); i += 2 {
		if rest[i] == 0 && rest[i+1] == 0 {
			end = i + 2
			break
		}
	}
	if end < 0 {
		return nil, fmt.Errorf("%w: load option description has no NUL", ErrInvalid)
	}
	desc, err := fromUTF16z(rest[:end])
	if err != nil {
		return nil, fmt.Errorf("load option description: %w", err)
	}
	o.Description = desc
	rest = rest[end:]
	if pathLen > len(rest) {
		return nil, fmt.Errorf("%w: load option %q states a device path of %d bytes, in %d left",
			ErrInvalid, desc, pathLen, len(rest))
	}
	path, after, err := ParseDevicePath(rest[:pathLen])
	if err != nil {
		return nil, fmt.Errorf("load option %q: %w", desc, err)
	}
	o.FilePath = path
	if len(after) != 0 {
		o.MoreFilePaths = bytes.Clone(after)
	}
	if len(rest) > pathLen {
		o.OptionalData = bytes.Clone(rest[pathLen:])
	}
	return o, nil
}
