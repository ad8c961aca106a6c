package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/mountinfo"
)

// The node's root filesystem.
//
// The kernel unpacks the initramfs into rootfs, the mount beneath every
// other in every mount namespace, which can be neither unmounted nor
// pivoted away from. runc jails a container with pivot_root, which refuses
// to move a root that is rootfs; and whatever is left in rootfs lies
// beneath every container's root, in reach of one that may unmount it
// (CAP_SYS_ADMIN: a privileged pod). So PID 1, before anything
// else, does what switch_root does for a system with a disk: it copies the
// initramfs onto a tmpfs of its own, moves the tmpfs over /, chroots into
// it and empties rootfs. The node then runs on a root as any other
// system's, and rootfs holds nothing at all.
//
// /init itself is not copied: emulated machines copy memory at some tens
// of MB a second, and the binary is most of the initramfs. PID 1 goes on
// running it from the file it was started from, unlinked from rootfs and
// kept by PID 1's mapping of it; /init in the new root is a link to that
// file, /proc/1/exe, which is what the core and modprobe run.

// newRootDir is where the root's tmpfs is mounted while the initramfs is
// copied onto it.
const newRootDir = "/newroot"

// initPath is PID 1's binary, which stays where it is.
const initPath = "/init"

// onRootfs reports whether / is still the kernel's rootfs. It mounts /proc
// to read the mount table and unmounts it again, so that rootfs holds no
// mount when it is emptied.
func onRootfs() (bool, error) {
	proc := bootMounts[0]
	if err := proc.mount(); err != nil {
		return false, err
	}
	mounts, readErr := mountinfo.Read()
	if err := unix.Unmount(proc.target, 0); err != nil {
		return false, fmt.Errorf("when unmounting %s after reading the mount table: %w", proc.target, err)
	}
	if readErr != nil {
		return false, readErr
	}
	// The last mount on / is the root; a chroot hides the ones beneath.
	root := ""
	for _, m := range mounts {
		if m.MountPoint == "/" {
			root = m.FSType
		}
	}
	return root == "rootfs", nil
}

// leaveRootfs moves the node's root from rootfs onto a tmpfs, or returns
// why it could not. When / is not rootfs (the kernel mounted a root) it
// does nothing. Until the copy is whole, nothing is removed from rootfs,
// so a failure leaves the node running from rootfs as before, with
// containers that cannot start.
func leaveRootfs() error {
	on, err := onRootfs()
	if err != nil || !on {
		return err
	}
	if err := os.Mkdir(newRootDir, 0o755); err != nil {
		return fmt.Errorf("when moving the root off rootfs: %w", err)
	}
	if err := unix.Mount("tmpfs", newRootDir, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("when moving the root off rootfs: mounting a tmpfs on %s: %w", newRootDir, err)
	}
	err = copyTree("/", newRootDir, newRootDir, initPath)
	if err == nil {
		err = os.Symlink("/proc/1/exe", filepath.Join(newRootDir, initPath))
	}
	if err != nil {
		// The partial copy goes with its tmpfs.
		unix.Unmount(newRootDir, unix.MNT_DETACH)
		os.Remove(newRootDir)
		return fmt.Errorf("when moving the root off rootfs: %w", err)
	}
	// The copy is whole: what fails from here on loses nothing.
	return moveRoot(newRootDir)
}

// moveRoot makes the mount at dir the root: it moves it over / and
// chroots into it. Then it empties the old root, rootfs, which no path
// names any more, from a descriptor opened before.
func moveRoot(dir string) error {
	old, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("when moving the root: %w", err)
	}
	defer unix.Close(old)
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("when moving the root: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		unix.Chdir("/")
		return fmt.Errorf("when moving the root: moving %s over /: %w", dir, err)
	}
	if err := unix.Chroot("."); err != nil {
		unix.Chdir("/")
		return fmt.Errorf("when moving the root: chroot into %s: %w", dir, err)
	}
	// Relative paths from the old root's descriptor reach into rootfs.
	if err := unix.Fchdir(old); err != nil {
		return fmt.Errorf("when emptying rootfs: %w", err)
	}
	rmErr := emptyDir(".")
	if err := unix.Chdir("/"); err != nil {
		return errors.Join(rmErr, fmt.Errorf("when moving the root: %w", err))
	}
	return rmErr
}

// copyTree copies the tree at src into the directory dst, leaving out the
// paths in skip: directories, regular files, symbolic links and device
// nodes, with their permissions and owners.
func copyTree(src, dst string, skip ...string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if slices.Contains(skip, path) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return fmt.Errorf("when copying %s: %w", path, err)
		}
		if rel == "." {
			return nil
		}
		if err := copyEntry(path, filepath.Join(dst, rel)); err != nil {
			return fmt.Errorf("when copying %s: %w", path, err)
		}
		return nil
	})
}

// copyEntry copies one entry of a tree, not what a directory holds.
func copyEntry(from, to string) error {
	var st unix.Stat_t
	if err := unix.Lstat(from, &st); err != nil {
		return err
	}
	kind := st.Mode & unix.S_IFMT
	switch kind {
	case unix.S_IFDIR:
		if err := os.Mkdir(to, 0o700); err != nil {
			return err
		}
	case unix.S_IFREG:
		if err := copyFile(from, to); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, to); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknod(to, kind|0o600, int(st.Rdev)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("a file of type %#o, which the root does not hold", kind)
	}
	if err := unix.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if kind == unix.S_IFLNK {
		return nil // a link has no permissions of its own
	}
	// After chown, which clears set-user-ID and set-group-ID bits.
	return unix.Chmod(to, st.Mode&0o7777)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// emptyDir removes everything in dir and returns what it could not
// remove.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("when emptying %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("when emptying %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
