package devicemapper

import (
	"encoding/hex"
	"fmt"
	"strconv"
)

// CryptKeySize is the key length of Cairn's dm-crypt volumes: AES-256-XTS
// takes two 256-bit AES keys, 512 bits in all.
const CryptKeySize = 64

// CryptCipher is the dm-crypt cipher specification Cairn uses: AES in XTS
// mode with the sector number as the IV.
const CryptCipher = "aes-xts-plain64"

// Crypt describes one dm-crypt mapping over a part of a block device.
type Crypt struct {
	// Device is the backing block device, as a path ("/dev/vda2") or as
	// "major:minor".
	Device string
	// Offset is the first sector (512 bytes) of Device that the mapping
	// uses; the mapped device's sector 0 is stored there.
	Offset uint64
	// Sectors is the size of the mapped device in 512-byte sectors.
	Sectors uint64
	// Key is the CryptKeySize-byte XTS key. It is never logged.
	Key []byte
}

// cryptSpec encodes c as the single target of a table:
//
//	0 <sectors> crypt aes-xts-plain64 <hex key> 0 <dev> <offset> 1 allow_discards
//
// The IV offset is 0; the one optional argument lets discards through, so
// that thin-provisioned disks stay thin. The returned record holds the key:
// the caller wipes it.
func (c Crypt) cryptSpec() ([]byte, error) {
	if len(c.Key) != CryptKeySize {
		return nil, fmt.Errorf("crypt key is %d bytes, want %d", len(c.Key), CryptKeySize)
	}
	if c.Sectors == 0 {
		return nil, fmt.Errorf("crypt mapping of %q has no sectors", c.Device)
	}
	if c.Device == "" {
		return nil, fmt.Errorf("crypt mapping has no device")
	}
	params := make([]byte, 0, 256)
	params = append(params, CryptCipher+" "...)
	params = hex.AppendEncode(params, c.Key)
	params = append(params, " 0 "...)
	params = append(params, c.Device...)
	params = append(params, ' ')
	params = strconv.AppendUint(params, c.Offset, 10)
	params = append(params, " 1 allow_discards"...)
	defer clear(params)
	return encodeSpec(0, c.Sectors, "crypt", params)
}
