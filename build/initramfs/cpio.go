package initramfs

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// File type bits of a cpio entry's mode, as in stat(2).
const (
	TypeDir     = 0o040000
	TypeRegular = 0o100000
	TypeSymlink = 0o120000
	TypeChar    = 0o020000
	typeMask    = 0o170000
)

// An Entry is one file, directory, symlink or device node of a cpio
// archive.
type Entry struct {
	// Name is the path inside the archive, relative, without a leading
	// slash ("dev/console").
	Name string
	// Mode holds the type bits (TypeDir, ...) and the permission bits.
	Mode uint32
	// Data is a regular file's content or a symlink's target.
	Data []byte
	// Major and Minor are a device node's device number.
	Major, Minor uint32
}

// A Writer writes a cpio archive in the "newc" format the kernel unpacks
// into its initial root filesystem. Every entry gets mtime 0, owner root
// and an inode number counted from 1, so equal inputs give equal archives.
type Writer struct {
	w      io.Writer
	ino    uint32
	offset int64
	closed bool
}

// NewWriter returns a Writer that writes the archive to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// Add writes one entry.
func (cw *Writer) Add(e Entry) error {
	if cw.closed {
		return fmt.Errorf("cpio: add %q after close", e.Name)
	}
	if err := checkName(e.Name); err != nil {
		return err
	}
	switch e.Mode & typeMask {
	case TypeRegular, TypeSymlink:
	case TypeDir, TypeChar:
		if len(e.Data) > 0 {
			return fmt.Errorf("cpio: %q: only files and symlinks have data", e.Name)
		}
	default:
		return fmt.Errorf("cpio: %q: unsupported file type %#o", e.Name, e.Mode&typeMask)
	}
	cw.ino++
	nlink := uint32(1)
	if e.Mode&typeMask == TypeDir {
		nlink = 2
	}
	return cw.write(cw.ino, e.Mode, nlink, e.Name, e.Data, e.Major, e.Minor)
}

// Close writes the trailer that ends the archive. It does not close the
// underlying writer.
func (cw *Writer) Close() error {
	if cw.closed {
		return nil
	}
	cw.closed = true
	return cw.write(0, 0, 1, "TRAILER!!!", nil, 0, 0)
}

// write emits a newc header, the name and the data, each padded to four
// bytes as the format demands.
func (cw *Writer) write(ino, mode, nlink uint32, name string, data []byte, major, minor uint32) error {
	if int64(len(data)) > 0xffffffff {
		return fmt.Errorf("cpio: %q is larger than newc's 4 GiB limit", name)
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, major, minor, len(name)+1, 0)
	if err := cw.put([]byte(hdr + name + "\x00")); err != nil {
		return err
	}
	if err := cw.pad(); err != nil {
		return err
	}
	if err := cw.put(data); err != nil {
		return err
	}
	return cw.pad()
}

func (cw *Writer) put(b []byte) error {
	n, err := cw.w.Write(b)
	cw.offset += int64(n)
	if err != nil {
		return fmt.Errorf("cpio: when writing: %w", err)
	}
	return nil
}

func (cw *Writer) pad() error {
	if r := cw.offset % 4; r != 0 {
		return cw.put(make([]byte, 4-r))
	}
	return nil
}

// checkName accepts clean relative paths only: the kernel resolves names
// against the root, and "..", empty or absolute names have no place there.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name ||
		name == "." || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("cpio: bad entry name %q", name)
	}
	return nil
}
