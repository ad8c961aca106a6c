// Package localvolume keeps the local persistent volumes of a node on its
// data partition: one directory per volume under a root directory, limited
// to the volume's size by an XFS project quota (pkg/fsquota), so that the
// space a volume has is exactly the space it was given and no volume can
// fill the partition that etcd, containerd and the logs share.
//
// A volume named N is the directory <root>/N:
//
//	<root>/N/data    a filesystem volume's files (what a pod mounts)
//	<root>/N/block   a block volume's sparse file (what a loop device exposes)
//
// The volume's directory holds its own project ID, which everything in it
// inherits. A filesystem volume's quota is its size, with one inode per
// 16 KiB of it (ext4's default ratio; at least minInodes); a block volume's
// quota is its size plus blockSlack for the filesystem's own blocks of the
// file.
//
// Space is reserved, not overcommitted: the sum of the volumes' sizes
// stays within the partition's size minus Config.Reserve, whatever the
// volumes actually use.
//
// A volume appears whole or not at all: it is built in <root>/.new-N and
// renamed into place, and deleted by a rename to <root>/.deleted-N before
// its files go. Leftovers of either, from a crash, are removed by New.
package localvolume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/fsquota"
)

// Mode is what a volume gives a pod: a directory or a block device.
type Mode int

const (
	Filesystem Mode = iota
	Block
)

func (m Mode) String() string {
	if m == Block {
		return "block"
	}
	return "filesystem"
}

// Quota parameters: the inode ratio of filesystem volumes and its floor,
// and the room a block volume's quota leaves beyond its size for the
// file's metadata blocks.
const (
	bytesPerInode = 16 << 10
	minInodes     = 1024
	blockSlack    = 1 << 20
	blockInodes   = 16
)

// Names of a volume's entries.
const (
	dataDir   = "data"
	blockFile = "block"
	newPrefix = ".new-"
	delPrefix = ".deleted-"
)

// Errors the callers tell apart, returned wrapped.
var (
	// ErrNotFound: no volume has this name.
	ErrNotFound = errors.New("no such volume")
	// ErrNoSpace: the node has less space left for volumes than asked.
	ErrNoSpace = errors.New("not enough space left for volumes on this node")
	// ErrExists: a volume of this name exists with another size or mode.
	ErrExists = errors.New("a different volume of this name exists")
	// ErrInvalid: a name or size no volume can have, or a shrink.
	ErrInvalid = errors.New("invalid volume request")
)

// Config says where the volumes live and what they must leave free.
type Config struct {
	// Root is the directory of the volumes, on the data partition.
	Root string
	// Reserve is the space of the partition that volumes never get.
	Reserve uint64
	// Changed, when set, is called after each change of what the volumes
	// take (a volume made, grown or deleted), with the Manager's lock
	// held: it must not block or call the Manager.
	Changed func()
}

// Volume is one volume as it is on disk.
type Volume struct {
	Name string
	Mode Mode
	// Bytes is the volume's size: its quota, or its block file's size.
	Bytes uint64
	// Project is the volume's project ID.
	Project uint32
	// Path is what a pod gets: the data directory or the block file.
	Path string
}

// Capacity is the space for volumes on the node.
type Capacity struct {
	// Total is the partition's size minus the reserve.
	Total uint64
	// Committed is the sum of the sizes of the volumes.
	Committed uint64
}

// Free is what is left for new volumes and growth.
func (c Capacity) Free() uint64 {
	if c.Committed >= c.Total {
		return 0
	}
	return c.Total - c.Committed
}

// Manager creates, grows and deletes the volumes of one root. Its methods
// may be called concurrently; they run one at a time.
type Manager struct {
	cfg Config
	mu  sync.Mutex
}

// New returns the Manager of cfg.Root, which it creates if needed. It
// removes what a crash left of volumes half created or half deleted, and
// fails with fsquota.ErrUnsupported when the root's filesystem has no
// project quotas.
func New(cfg Config) (*Manager, error) {
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("when creating the volumes' directory %s: %w", cfg.Root, err)
	}
	if _, _, err := fsquota.Get(cfg.Root, 0); err != nil {
		return nil, fmt.Errorf("local volumes need project quotas: %w", err)
	}
	entries, err := os.ReadDir(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("when listing %s: %w", cfg.Root, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), newPrefix) || strings.HasPrefix(e.Name(), delPrefix) {
			if err := os.RemoveAll(filepath.Join(cfg.Root, e.Name())); err != nil {
				return nil, fmt.Errorf("when removing the leftover %s: %w", e.Name(), err)
			}
		}
	}
	return &Manager{cfg: cfg}, nil
}

// nameRE is a Kubernetes object name (a DNS subdomain), which is what
// volumes are named after: a single path element, never hidden. Its length
// (maxNameLength) is checked apart: a bounded repeat in the expression
// compiles to one copy per character, 165 KB built when the node binary
// starts, which it does for every module the kernel asks for.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

const maxNameLength = 253

func checkName(name string) error {
	if len(name) > maxNameLength || !nameRE.MatchString(name) {
		return fmt.Errorf("%w: volume name %q is not a DNS subdomain name (lower-case letters, digits, '-' and '.', at most %d)", ErrInvalid, name, maxNameLength)
	}
	return nil
}

// sizeUnit is what volume sizes are rounded up to: the unit of quotas.
const sizeUnit = 1024

// roundUp rounds size up to a whole sizeUnit.
func roundUp(size uint64) uint64 {
	return (size + sizeUnit - 1) / sizeUnit * sizeUnit
}

// quotaOf is the quota of a volume of mode and size.
func quotaOf(mode Mode, size uint64) fsquota.Limits {
	if mode == Block {
		return fsquota.Limits{Bytes: size + blockSlack, Inodes: blockInodes}
	}
	return fsquota.Limits{Bytes: size, Inodes: max(size/bytesPerInode, minInodes)}
}

// Create makes volume name of size bytes (rounded up to a KiB) and mode,
// or returns the volume
// of that name if it exists with the same size and mode (a retried
// request). It fails with ErrNoSpace, touching nothing, when the node has
// less than size left for volumes.
func (m *Manager) Create(name string, size uint64, mode Mode) (Volume, error) {
	if err := checkName(name); err != nil {
		return Volume{}, err
	}
	if size == 0 {
		return Volume{}, fmt.Errorf("%w: volume %s of 0 bytes", ErrInvalid, name)
	}
	size = roundUp(size)
	m.mu.Lock()
	defer m.mu.Unlock()
	vols, err := m.list()
	if err != nil {
		return Volume{}, err
	}
	if i := slices.IndexFunc(vols, func(v Volume) bool { return v.Name == name }); i >= 0 {
		v := vols[i]
		if v.Mode != mode || v.Bytes != size {
			return Volume{}, fmt.Errorf("%w: %s is a %s volume of %d bytes, not a %s volume of %d", ErrExists, name, v.Mode, v.Bytes, mode, size)
		}
		return v, nil
	}
	capacity, err := m.capacity(vols)
	if err != nil {
		return Volume{}, err
	}
	if size > capacity.Free() {
		return Volume{}, fmt.Errorf("%w: volume %s needs %s, and %s of the %s for volumes are left (the data partition less a reserve of %s)",
			ErrNoSpace, name, SizeText(size), SizeText(capacity.Free()), SizeText(capacity.Total), SizeText(m.cfg.Reserve))
	}
	project := uint32(1)
	for _, v := range vols {
		project = max(project, v.Project+1)
	}
	tmp := filepath.Join(m.cfg.Root, newPrefix+name)
	if err := m.build(tmp, project, size, mode); err != nil {
		os.RemoveAll(tmp)
		return Volume{}, fmt.Errorf("when creating volume %s: %w", name, err)
	}
	dir := filepath.Join(m.cfg.Root, name)
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return Volume{}, fmt.Errorf("when creating volume %s: %w", name, err)
	}
	if err := syncDir(m.cfg.Root); err != nil {
		return Volume{}, fmt.Errorf("when creating volume %s: %w", name, err)
	}
	m.changed()
	return m.read(name)
}

// changed tells Config.Changed, if any, of a change.
func (m *Manager) changed() {
	if m.cfg.Changed != nil {
		m.cfg.Changed()
	}
}

// build sets a volume up in dir: its project, quota and contents.
func (m *Manager) build(dir string, project uint32, size uint64, mode Mode) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := fsquota.SetProject(dir, project); err != nil {
		return err
	}
	if err := fsquota.SetLimits(dir, project, quotaOf(mode, size)); err != nil {
		return err
	}
	if mode == Filesystem {
		// Pods run as any user: the volume's root is theirs to write.
		if err := os.Mkdir(filepath.Join(dir, dataDir), 0o777); err != nil {
			return err
		}
		return os.Chmod(filepath.Join(dir, dataDir), 0o777)
	}
	f, err := os.OpenFile(filepath.Join(dir, blockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(size))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Expand grows volume name to size bytes: its quota for a filesystem
// volume, its file for a block volume (whose loop device then needs to
// learn the new size). A size the volume has already is no change; a
// smaller one is ErrInvalid; growth beyond what is left is ErrNoSpace.
func (m *Manager) Expand(name string, size uint64) (Volume, error) {
	if err := checkName(name); err != nil {
		return Volume{}, err
	}
	size = roundUp(size)
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.read(name)
	if err != nil {
		return Volume{}, err
	}
	switch {
	case size == v.Bytes:
		return v, nil
	case size < v.Bytes:
		return Volume{}, fmt.Errorf("%w: volume %s has %d bytes and cannot shrink to %d", ErrInvalid, name, v.Bytes, size)
	}
	vols, err := m.list()
	if err != nil {
		return Volume{}, err
	}
	capacity, err := m.capacity(vols)
	if err != nil {
		return Volume{}, err
	}
	if grow := size - v.Bytes; grow > capacity.Free() {
		return Volume{}, fmt.Errorf("%w: volume %s needs %s more to reach %s, and %s are left", ErrNoSpace, name, SizeText(grow), SizeText(size), SizeText(capacity.Free()))
	}
	dir := filepath.Join(m.cfg.Root, name)
	// The quota first: a block file never outgrows it.
	if err := fsquota.SetLimits(dir, v.Project, quotaOf(v.Mode, size)); err != nil {
		return Volume{}, fmt.Errorf("when growing volume %s: %w", name, err)
	}
	if v.Mode == Block {
		if err := os.Truncate(v.Path, int64(size)); err != nil {
			return Volume{}, fmt.Errorf("when growing volume %s: %w", name, err)
		}
	}
	m.changed()
	return m.read(name)
}

// Delete removes volume name and its data. A volume that does not exist
// is no error.
func (m *Manager) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.read(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	gone := filepath.Join(m.cfg.Root, delPrefix+name)
	if err := os.Rename(filepath.Join(m.cfg.Root, name), gone); err != nil {
		return fmt.Errorf("when deleting volume %s: %w", name, err)
	}
	if err := syncDir(m.cfg.Root); err != nil {
		return fmt.Errorf("when deleting volume %s: %w", name, err)
	}
	m.changed()
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("when removing the data of volume %s: %w", name, err)
	}
	if err := fsquota.SetLimits(m.cfg.Root, v.Project, fsquota.Limits{}); err != nil {
		return fmt.Errorf("when removing the quota of volume %s: %w", name, err)
	}
	return nil
}

// Get returns volume name, or ErrNotFound.
func (m *Manager) Get(name string) (Volume, error) {
	if err := checkName(name); err != nil {
		return Volume{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.read(name)
}

// List returns every volume, by name.
func (m *Manager) List() ([]Volume, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.list()
}

// Capacity returns the space for volumes and how much of it is given.
func (m *Manager) Capacity() (Capacity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vols, err := m.list()
	if err != nil {
		return Capacity{}, err
	}
	return m.capacity(vols)
}

// Usage returns what volume name uses and its quota.
func (m *Manager) Usage(name string) (fsquota.Usage, fsquota.Limits, error) {
	v, err := m.Get(name)
	if err != nil {
		return fsquota.Usage{}, fsquota.Limits{}, err
	}
	l, u, err := fsquota.Get(filepath.Join(m.cfg.Root, name), v.Project)
	if err != nil {
		return fsquota.Usage{}, fsquota.Limits{}, fmt.Errorf("when reading the usage of volume %s: %w", name, err)
	}
	return u, l, nil
}

func (m *Manager) list() ([]Volume, error) {
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("when listing the volumes in %s: %w", m.cfg.Root, err)
	}
	var vols []Volume
	for _, e := range entries {
		if !e.IsDir() || checkName(e.Name()) != nil {
			continue
		}
		v, err := m.read(e.Name())
		if err != nil {
			return nil, err
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// read reads volume name from its directory.
func (m *Manager) read(name string) (Volume, error) {
	dir := filepath.Join(m.cfg.Root, name)
	project, _, err := fsquota.Project(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Volume{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Volume{}, fmt.Errorf("when reading volume %s: %w", name, err)
	}
	v := Volume{Name: name, Project: project}
	if st, err := os.Stat(filepath.Join(dir, blockFile)); err == nil && st.Mode().IsRegular() {
		v.Mode, v.Bytes, v.Path = Block, uint64(st.Size()), filepath.Join(dir, blockFile)
		return v, nil
	}
	l, _, err := fsquota.Get(dir, project)
	if err != nil {
		return Volume{}, fmt.Errorf("when reading volume %s: %w", name, err)
	}
	if l.Bytes == 0 {
		return Volume{}, fmt.Errorf("volume %s (project %d) has no quota: its directory was not made by this package, or was changed by hand", name, project)
	}
	v.Mode, v.Bytes, v.Path = Filesystem, l.Bytes, filepath.Join(dir, dataDir)
	return v, nil
}

func (m *Manager) capacity(vols []Volume) (Capacity, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.cfg.Root, &st); err != nil {
		return Capacity{}, fmt.Errorf("when reading the size of the filesystem of %s: %w", m.cfg.Root, err)
	}
	var c Capacity
	if size := st.Blocks * uint64(st.Bsize); size > m.cfg.Reserve {
		c.Total = size - m.cfg.Reserve
	}
	for _, v := range vols {
		c.Committed += v.Bytes
	}
	return c, nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SizeText writes n bytes in the largest binary unit that keeps it
// readable, as the errors of this package and what tells of volumes do.
func SizeText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
