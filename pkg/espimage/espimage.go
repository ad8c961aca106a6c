// Package espimage reads and writes single files in the EFI system
// partition of a disk image, without mounting anything: the operator's
// cairnctl uses it to drop node parameters (cairn/parameters.pb) onto an
// image before it is written to a disk or booted in qemu.
//
//	image file ──GPT──▶ EFI system partition ──FAT32──▶ /cairn/parameters.pb
//	 (go-diskfs)          (standard EFI type GUID)       (go-diskfs fat32)
//
// The image must hold a GPT with exactly one partition of the standard EFI
// system partition type, formatted FAT32, as build/disk makes it. Nothing
// else on the image is touched: only the ESP's directory entries, FAT and
// the clusters of the file written change.
package espimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

var (
	// ErrNoGPT is returned for an image without a readable GPT.
	ErrNoGPT = errors.New("image has no GUID partition table")
	// ErrNoESP is returned for an image whose GPT lists no EFI system
	// partition.
	ErrNoESP = errors.New("image has no EFI system partition")
	// ErrNotExist is returned by ReadFile when the ESP holds no such file.
	ErrNotExist = errors.New("no such file on the ESP")
)

// maxFileSize bounds what ReadFile reads: files Cairn keeps on the ESP are
// small protobufs, and a damaged directory entry must not make cairnctl
// allocate gigabytes.
const maxFileSize = 64 << 20

// image is an open disk image and the FAT32 filesystem of its ESP.
type image struct {
	disk *disk.Disk
	fs   *fat32.FileSystem
	// espStart is the byte offset of the ESP in the image.
	espStart int64
}

// open opens the image at imagePath and the filesystem of its ESP, for
// writing when write is set.
func open(imagePath string, write bool) (*image, error) {
	mode := diskfs.ReadOnly
	if write {
		mode = diskfs.ReadWrite
	}
	// diskfs.Open checks that the path exists, but words the error its own
	// way; stat first so that a missing image is os.ErrNotExist.
	if _, err := os.Stat(imagePath); err != nil {
		return nil, fmt.Errorf("when opening image: %w", err)
	}
	d, err := diskfs.Open(imagePath, diskfs.WithOpenMode(mode))
	if err != nil {
		return nil, fmt.Errorf("when opening image %s: %w", imagePath, err)
	}
	fs, start, err := openESP(d)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("in image %s: %w", imagePath, err)
	}
	return &image{disk: d, fs: fs, espStart: start}, nil
}

// openESP finds the one EFI system partition in d's GPT and reads its
// FAT32 filesystem, returning it with the ESP's byte offset.
func openESP(d *disk.Disk) (*fat32.FileSystem, int64, error) {
	pt, err := d.GetPartitionTable()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrNoGPT, err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok {
		return nil, 0, fmt.Errorf("%w: found a %s table", ErrNoGPT, pt.Type())
	}
	var esp *gpt.Partition
	for _, p := range table.Partitions {
		if p == nil || p.Type != gpt.EFISystemPartition {
			continue
		}
		if esp != nil {
			return nil, 0, fmt.Errorf("image has more than one EFI system partition (%d and %d)", esp.Index, p.Index)
		}
		esp = p
	}
	if esp == nil {
		return nil, 0, ErrNoESP
	}
	fs, err := fat32.Read(d.Backend, esp.GetSize(), esp.GetStart(), d.LogicalBlocksize)
	if err != nil {
		return nil, 0, fmt.Errorf("EFI system partition %d is not FAT32: %w", esp.Index, err)
	}
	return fs, esp.GetStart(), nil
}

func (im *image) close() error {
	if err := im.disk.Close(); err != nil {
		return fmt.Errorf("when closing image: %w", err)
	}
	return nil
}

// cleanName turns name into a clean path relative to the ESP's root, the
// form io/fs and go-diskfs's FAT code both take, and refuses names that
// are no file ("", "/", "..").
func cleanName(name string) (string, error) {
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "" || strings.HasSuffix(name, "/") {
		return "", fmt.Errorf("ESP path %q names no file", name)
	}
	return p, nil
}

// WriteFile writes data as the file name ("cairn/parameters.pb" or
// "/cairn/parameters.pb") on the ESP of the GPT disk image at imagePath.
// Missing parent directories are created; a file of that name is
// replaced.
func WriteFile(imagePath, name string, data []byte) (err error) {
	p, err := cleanName(name)
	if err != nil {
		return err
	}
	im, err := open(imagePath, true)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := im.close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = tidyFAT(imagePath, im.espStart)
		}
	}()
	if err := writeFAT(im.fs, p, data); err != nil {
		return fmt.Errorf("on the ESP: %w", err)
	}
	return nil
}

// writeFAT writes data as the file p (clean, relative) of fs, making its
// parent directories and replacing a file of that name.
func writeFAT(fs filesystem.FileSystem, p string, data []byte) error {
	if dir := path.Dir(p); dir != "." {
		if err := fs.Mkdir(dir); err != nil {
			return fmt.Errorf("when creating %s: %w", dir, err)
		}
	}
	f, err := fs.OpenFile(p, os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("when creating %s: %w", p, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("when writing %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("when closing %s: %w", p, err)
	}
	return nil
}

// ReadFile returns the contents of the file name on the ESP of the GPT
// disk image at imagePath. A missing file is ErrNotExist.
func ReadFile(imagePath, name string) (data []byte, err error) {
	p, err := cleanName(name)
	if err != nil {
		return nil, err
	}
	im, err := open(imagePath, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := im.close(); err == nil {
			err = cerr
		}
	}()
	st, err := im.fs.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotExist, p, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s on the ESP is a directory", p)
	}
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("%s on the ESP is %d bytes, more than the %d this reads", p, st.Size(), maxFileSize)
	}
	f, err := im.fs.Open(p)
	if err != nil {
		return nil, fmt.Errorf("when opening %s on the ESP: %w", p, err)
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, maxFileSize))
	if err != nil {
		return nil, fmt.Errorf("when reading %s on the ESP: %w", p, err)
	}
	return data, nil
}
