package devicemapper

import (
	"fmt"
)

// CreateCrypt maps blockDevice, sizeSectors 512-byte sectors long from its
// start, as the dm-crypt device name with an aes-xts-plain64 key of
// CryptKeySize bytes, and activates it. It returns the new device's
// number; with devtmpfs mounted its node is /dev/dm-<minor>.
func CreateCrypt(name, blockDevice string, sizeSectors uint64, key []byte) (uint64, error) {
	c, err := Open()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.CreateCrypt(name, Crypt{Device: blockDevice, Sectors: sizeSectors, Key: key})
}

// CreateCrypt creates, loads and resumes the dm-crypt device name for
// crypt. When a step fails the half-made device is removed again, so that
// a retry starts from nothing.
func (c *Control) CreateCrypt(name string, crypt Crypt) (uint64, error) {
	spec, err := crypt.cryptSpec()
	if err != nil {
		return 0, fmt.Errorf("when creating crypt device %q: %w", name, err)
	}
	defer clear(spec)
	return c.createLoaded(name, spec, 0)
}
