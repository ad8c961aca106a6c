package system

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"cairn.dev/cairn/build/elfdeps"
)

// A HostBinary is a program of the build machine that the system image
// carries at the same path below MountPoint, together with its loader
// and libraries.
type HostBinary struct {
	// Path is the absolute path on the build machine and in the image.
	Path string
	// Why says which part of the node runs it, for people.
	Why string
}

// HostBinaries are the dynamically linked programs Cairn's system image
// carries from Debian. Each costs its libraries too, so the list stays
// short: what Go cannot reasonably do itself.
var HostBinaries = []HostBinary{
	{"/usr/sbin/mkfs.xfs", "data partition filesystem, node/localstorage"},
	{"/usr/bin/mount", "the kubelet's volume mounts (k8s.io/mount-utils runs it)"},
	{"/usr/bin/umount", "the kubelet's volume unmounts"},
	{"/usr/sbin/losetup", "the kubelet's hold on block volumes (its volumepathhandler runs it)"},
	{"/usr/sbin/nft", "kube-proxy's nftables mode (knftables runs it)"},
}

// HostBinaryPaths returns the paths of bins, in order.
func HostBinaryPaths(bins []HostBinary) []string {
	paths := make([]string, len(bins))
	for i, b := range bins {
		paths[i] = b.Path
	}
	return paths
}

// A Link is a symlink of the initramfs.
type Link struct {
	// Path is the link's absolute path in the initramfs.
	Path string
	// Target is what it points to.
	Target string
}

// LoaderLinks are the symlinks the initramfs carries so that the host
// binaries run from MountPoint: the loader's own path, and the directory
// where it finds the libraries (Debian's multiarch one, the first of
// elfdeps.DefaultSearchDirs). Build fails when a library lies elsewhere.
var LoaderLinks = []Link{
	{"/lib64", MountPoint + "/lib64"},
	{"/lib/x86_64-linux-gnu", MountPoint + "/lib/x86_64-linux-gnu"},
}

// checkLoaderLinks fails unless every file of c but the binaries lies
// below one of LoaderLinks, where the loader will look on the node.
func checkLoaderLinks(c *elfdeps.Closure, binaries []string) error {
	for _, f := range c.Files {
		if slices.Contains(binaries, f.Path) {
			continue
		}
		linked := slices.ContainsFunc(LoaderLinks, func(l Link) bool {
			return strings.HasPrefix(f.Path, l.Path+"/")
		})
		if !linked {
			return fmt.Errorf("%s lies outside the directories the initramfs links into %s (%s): add a link to system.LoaderLinks",
				f.Path, MountPoint, linkPaths())
		}
	}
	return nil
}

func linkPaths() string {
	var paths []string
	for _, l := range LoaderLinks {
		paths = append(paths, filepath.Clean(l.Path))
	}
	return strings.Join(paths, ", ")
}
