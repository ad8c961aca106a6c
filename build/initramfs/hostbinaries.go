package initramfs

import (
	"fmt"
	"os"
	"strings"

	"cairn.dev/cairn/build/elfdeps"
)

// A HostBinary is a program of the build machine that the initramfs
// carries at the same path, together with its interpreter and libraries.
type HostBinary struct {
	// Path is the absolute path on the build machine and in the image.
	Path string
	// Why says which part of the node runs it, for people.
	Why string
}

// HostBinaries are the dynamically linked programs Cairn's initramfs
// carries from Debian. Each costs its libraries too, so the list stays
// short: what Go cannot reasonably do itself.
var HostBinaries = []HostBinary{
	{"/usr/sbin/mkfs.xfs", "data partition filesystem, node/localstorage"},
}

// HostBinaryPaths returns the paths of bins, in order.
func HostBinaryPaths(bins []HostBinary) []string {
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	return paths
}

// AddHostFiles reads files from the build machine and puts each at its own
// path: regular files with their permission bits, symlinks as symlinks.
// It returns the number of bytes of file content added.
func (a *Archive) AddHostFiles(files []elfdeps.File) (int64, error) {
	var size int64
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		if f.Link != "" {
			a.Add(Entry{Name: name, Mode: TypeSymlink | 0o777, Data: []byte(f.Link)})
			continue
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return 0, fmt.Errorf("when reading %s: %w", f.Path, err)
		}
		a.Add(Entry{Name: name, Mode: TypeRegular | uint32(f.Mode.Perm()), Data: data})
		size += int64(len(data))
	}
	return size, nil
}
