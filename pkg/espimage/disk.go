package espimage

import (
	"fmt"
	"os"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
)

// DiskSize is the size of the images NewDisk makes: a FAT32 filesystem
// needs at least 65525 clusters, which go-diskfs makes of 512 bytes on a
// volume this small. The file is sparse; a stick it is written to may be
// larger.
const DiskSize = 40 << 20

// NewDisk makes a new image at imagePath, which must not exist, holding a
// FAT32 filesystem over the whole disk (no partition table) with data as
// the file name ("cairn/parameters.pb"): what a node reads as a
// parameters disk, to write onto a USB stick or attach to a virtual
// machine.
func NewDisk(imagePath, name string, data []byte) (err error) {
	p, err := cleanName(name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(imagePath); err == nil {
		return fmt.Errorf("when making %s: %w", imagePath, os.ErrExist)
	}
	d, err := diskfs.Create(imagePath, DiskSize, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("when making %s: %w", imagePath, err)
	}
	defer func() {
		if cerr := d.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("when closing %s: %w", imagePath, cerr)
		}
		if err == nil {
			err = tidyFAT(imagePath, 0)
		}
		if err != nil {
			os.Remove(imagePath)
		}
	}()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: "CAIRN"})
	if err != nil {
		return fmt.Errorf("when making a FAT32 filesystem on %s: %w", imagePath, err)
	}
	return writeFAT(fs, p, data)
}
