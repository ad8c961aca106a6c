package initramfs

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/pierrec/lz4/v4"

	"cairn.dev/cairn/build/modules"
)

// An Archive collects the entries of an initramfs. Parent directories are
// added on their own; Write emits everything sorted by name.
type Archive struct {
	entries map[string]Entry
}

// New returns an archive holding Cairn's base layout: the mount points,
// scratch directories and the device nodes the kernel opens before /init
// can mount devtmpfs.
func New() *Archive {
	a := &Archive{entries: map[string]Entry{}}
	for _, dir := range []string{"dev", "etc", "proc", "run", "sys"} {
		a.Add(Entry{Name: dir, Mode: TypeDir | 0o755})
	}
	a.Add(Entry{Name: "tmp", Mode: TypeDir | 0o1777})
	// The kernel opens /dev/console for /init's stdin, stdout and stderr.
	a.Add(Entry{Name: "dev/console", Mode: TypeChar | 0o600, Major: 5, Minor: 1})
	a.Add(Entry{Name: "dev/null", Mode: TypeChar | 0o666, Major: 1, Minor: 3})
	// The first serial port, for an /init that reports before devtmpfs is
	// mounted (the boot benchmarks' null init).
	a.Add(Entry{Name: "dev/ttyS0", Mode: TypeChar | 0o600, Major: 4, Minor: 64})
	return a
}

// Add puts e into the archive, replacing an entry of the same name, and
// adds the directories above it that are not there yet.
func (a *Archive) Add(e Entry) {
	for dir := path.Dir(e.Name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := a.entries[dir]; !ok {
			a.entries[dir] = Entry{Name: dir, Mode: TypeDir | 0o755}
		}
	}
	a.entries[e.Name] = e
}

// AddInit puts the node binary at /init.
func (a *Archive) AddInit(binary []byte) {
	a.Add(Entry{Name: "init", Mode: TypeRegular | 0o755, Data: binary})
}

// AddModules puts a module set under /lib/modules/<release>. There is no
// /sbin/modprobe beside them: /init makes that link once it runs, so that
// the kernel does not start /init as modprobe before then (cmd/init,
// serveModuleRequests).
func (a *Archive) AddModules(s *modules.Set) {
	base := path.Join("lib/modules", s.Release)
	a.Add(Entry{Name: base, Mode: TypeDir | 0o755})
	for _, f := range s.Files {
		a.Add(Entry{Name: path.Join(base, f.Name), Mode: TypeRegular | 0o644, Data: f.Data})
	}
}

// Write writes the archive, uncompressed, entries sorted by name so every
// directory comes before what it holds.
func (a *Archive) Write(w io.Writer) error {
	names := make([]string, 0, len(a.entries))
	for name := range a.entries {
		names = append(names, name)
	}
	slices.SortFunc(names, comparePaths)
	cw := NewWriter(w)
	for _, name := range names {
		if err := cw.Add(a.entries[name]); err != nil {
			return err
		}
	}
	return cw.Close()
}

// comparePaths orders paths component by component, so "a/b" sorts right
// after "a" and before "a-b": a directory's contents directly follow it.
func comparePaths(x, y string) int {
	return slices.Compare(strings.Split(x, "/"), strings.Split(y, "/"))
}

// lz4EndMark ends a legacy LZ4 stream for the kernel: a zero block size.
var lz4EndMark [4]byte

// Compressed returns the archive compressed with LZ4 in its legacy frame
// format, the one the kernel's initramfs unpacker reads (8 MiB blocks), at
// the strongest level, and ends it with a zero block size.
//
// The legacy format has no end mark: the kernel reads blocks until its
// input ends, so a cpio archive appended after the stream (the tests add
// files that way; systemd's stub may add its own) would be read as one
// more block and fail to decode. The kernel takes a zero block size as the
// end of the stream and then unpacks what follows.
//
// LZ4, not zstd or xz: the kernel unpacks the initramfs at every boot and
// every kexec, on one vCPU under software emulation, and LZ4 decompresses
// several times faster than zstd. Its archive is some 20 % larger, which
// firmware reads quickly; kexec hashes those bytes too, which costs less
// than what the faster unpacking saves.
func (a *Archive) Compressed() ([]byte, error) {
	var raw bytes.Buffer
	if err := a.Write(&raw); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	w := lz4.NewWriter(&out)
	if err := w.Apply(lz4.LegacyOption(true), lz4.CompressionLevelOption(lz4.Level9)); err != nil {
		return nil, fmt.Errorf("when configuring lz4: %w", err)
	}
	if _, err := w.Write(raw.Bytes()); err != nil {
		return nil, fmt.Errorf("when compressing with lz4: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("when compressing with lz4: %w", err)
	}
	out.Write(lz4EndMark[:])
	return out.Bytes(), nil
}
