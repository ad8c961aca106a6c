// Package fsquota limits the space and inodes under a directory with the
// project quotas of Linux filesystems (XFS mounted with prjquota, the
// node's data partition): a directory is given a project ID that its new
// files and subdirectories inherit, and the project gets limits that the
// kernel enforces and whose usage it counts.
//
// The project ID is set with the FS_IOC_FSSETXATTR ioctl; limits and usage
// go through quotactl_fd(2) on the directory itself, so that the caller
// never needs to know the filesystem's block device.
//
// A project ID names one directory tree per filesystem: choosing IDs that
// do not collide is the caller's task.
package fsquota

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Limits are a project's hard limits. Zero means no limit.
type Limits struct {
	// Bytes is the most space the project may use, rounded up to the
	// quota's unit, a KiB.
	Bytes uint64
	// Inodes is the most files and directories the project may hold.
	Inodes uint64
}

// Usage is what a project uses, as the filesystem counts it.
type Usage struct {
	Bytes  uint64
	Inodes uint64
}

// ErrUnsupported is returned, wrapped, when the filesystem of a directory
// has no project quotas: the kernel lacks them, or the filesystem is not
// mounted with them (XFS's prjquota).
var ErrUnsupported = errors.New("project quotas are not enabled on this filesystem")

// fsxattr is the kernel's struct fsxattr, the argument of the
// FS_IOC_FSGETXATTR and FS_IOC_FSSETXATTR ioctls.
type fsxattr struct {
	xflags     uint32
	extsize    uint32
	nextents   uint32
	projid     uint32
	cowextsize uint32
	pad        [8]byte
}

// The ioctls on struct fsxattr, _IOR and _IOW('X', 31 and 32), and the flag
// that makes new entries of a directory take its project ID.
const (
	fsIocFsGetXattr    = 0x801c581f
	fsIocFsSetXattr    = 0x401c5820
	fsXflagProjInherit = 0x00000200
)

// quotactl's commands, as QCMD(Q_GETQUOTA or Q_SETQUOTA, PRJQUOTA) builds
// them, and if_dqblk's unit and fields.
const (
	qGetQuota      = 0x800007<<8 | 2
	qSetQuota      = 0x800008<<8 | 2
	quotaBlockSize = 1024 // QIF_DQBLKSIZE: the unit of if_dqblk's block limits
	qifBlockLimits = 1    // QIF_BLIMITS
	qifInodeLimits = 4    // QIF_ILIMITS
)

// The structs are the kernel's sizes, or this does not compile.
var (
	_ [28]byte = [unsafe.Sizeof(fsxattr{})]byte{}
	_ [72]byte = [unsafe.Sizeof(ifDqblk{})]byte{}
)

// ifDqblk is the kernel's struct if_dqblk, the argument of Q_GETQUOTA and
// Q_SETQUOTA.
type ifDqblk struct {
	bhardlimit uint64 // in quotaBlockSize units
	bsoftlimit uint64
	curspace   uint64 // in bytes
	ihardlimit uint64
	isoftlimit uint64
	curinodes  uint64
	btime      uint64
	itime      uint64
	valid      uint32
	_          uint32
}

// SetProject gives dir the project ID project and makes the files and
// directories created in it inherit it. It does not change what dir
// already holds: give a project to a directory while it is empty.
func SetProject(dir string, project uint32) error {
	f, err := openDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	var x fsxattr
	if err := ioctlPtr(f, fsIocFsGetXattr, unsafe.Pointer(&x)); err != nil {
		return fmt.Errorf("when reading the project of %s: %w", dir, unsupported(err))
	}
	x.projid = project
	x.xflags |= fsXflagProjInherit
	if err := ioctlPtr(f, fsIocFsSetXattr, unsafe.Pointer(&x)); err != nil {
		return fmt.Errorf("when setting the project of %s to %d: %w", dir, project, unsupported(err))
	}
	return nil
}

// Project returns the project ID of dir, and whether its new entries
// inherit it.
func Project(dir string) (project uint32, inherit bool, err error) {
	f, err := openDir(dir)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var x fsxattr
	if err := ioctlPtr(f, fsIocFsGetXattr, unsafe.Pointer(&x)); err != nil {
		return 0, false, fmt.Errorf("when reading the project of %s: %w", dir, unsupported(err))
	}
	return x.projid, x.xflags&fsXflagProjInherit != 0, nil
}

// SetLimits sets the hard limits of project on the filesystem that holds
// dir, replacing the ones it had; zero Limits remove them. Lowering a limit
// below the usage keeps what is there and refuses what would add to it.
func SetLimits(dir string, project uint32, l Limits) error {
	f, err := openDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	q := ifDqblk{
		bhardlimit: (l.Bytes + quotaBlockSize - 1) / quotaBlockSize,
		ihardlimit: l.Inodes,
		valid:      qifBlockLimits | qifInodeLimits,
	}
	if err := quotactlFd(f, qSetQuota, project, &q); err != nil {
		return fmt.Errorf("when setting the limits of project %d on the filesystem of %s to %d bytes, %d inodes: %w", project, dir, l.Bytes, l.Inodes, unsupported(err))
	}
	return nil
}

// Get returns the hard limits and the usage of project on the filesystem
// that holds dir. A project the filesystem has no record of has neither.
func Get(dir string, project uint32) (Limits, Usage, error) {
	f, err := openDir(dir)
	if err != nil {
		return Limits{}, Usage{}, err
	}
	defer f.Close()
	var q ifDqblk
	err = quotactlFd(f, qGetQuota, project, &q)
	switch {
	case errors.Is(err, unix.ENOENT):
		return Limits{}, Usage{}, nil
	case err != nil:
		return Limits{}, Usage{}, fmt.Errorf("when reading the quota of project %d on the filesystem of %s: %w", project, dir, unsupported(err))
	}
	return Limits{Bytes: q.bhardlimit * quotaBlockSize, Inodes: q.ihardlimit}, Usage{Bytes: q.curspace, Inodes: q.curinodes}, nil
}

// openDir opens dir for the ioctls and quotactl_fd.
func openDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("when opening the directory %s: %w", dir, err)
	}
	return f, nil
}

// ioctlPtr runs the ioctl req with the argument arg on f.
func ioctlPtr(f *os.File, req uint, arg unsafe.Pointer) error {
	return syscallOn(f, unix.SYS_IOCTL, uintptr(req), uintptr(arg), 0)
}

// quotactlFd runs the project quota command cmd for id on the filesystem
// of f.
func quotactlFd(f *os.File, cmd uint32, id uint32, q *ifDqblk) error {
	return syscallOn(f, unix.SYS_QUOTACTL_FD, uintptr(cmd), uintptr(id), uintptr(unsafe.Pointer(q)))
}

// syscallOn runs the system call trap with f's descriptor and the
// arguments a, b and c, keeping f open meanwhile.
func syscallOn(f *os.File, trap, a, b, c uintptr) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := conn.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(trap, fd, a, b, c, 0, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// unsupported wraps the errors by which the kernel says a filesystem has
// no project quotas with ErrUnsupported.
func unsupported(err error) error {
	switch {
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w (%w)", ErrUnsupported, err)
	}
	return err
}
