package system

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/build/elfdeps"
	"cairn.dev/cairn/build/modules"
	"cairn.dev/cairn/pkg/verity"
)

const (
	// MountPoint is where a node mounts the system partition
	// (node/localstorage's Root.System).
	MountPoint = "/system"
	// FilesystemUUID is the EROFS filesystem's UUID, fixed so that the
	// image is reproducible. Chosen at random once.
	FilesystemUUID = "3b00efc1-f965-470b-b40e-7d32290bf67a"
	// ModulesDir is where the system image holds the kernel's module
	// directories, below MountPoint on a node. A node puts its kernel's
	// over the initramfs's /lib/modules/<release> once the partition is
	// mounted.
	ModulesDir = "/lib/modules"
	// saltLabel starts what the verity salt is hashed from.
	saltLabel = "cairn system image verity salt v1\x00"
)

// mkfsArgs make the EROFS image reproducible and compact: lz4hc (the
// Debian kernel decompresses lz4 built in), every timestamp 0, every
// owner root, no extended attributes, a fixed UUID, nothing printed.
var mkfsArgs = []string{"-zlz4hc", "-T0", "--all-root", "-x-1", "-U" + FilesystemUUID, "--quiet"}

// Config says what goes into the system image.
type Config struct {
	// Binaries are the absolute paths of the host binaries to carry, each
	// with its loader and libraries (HostBinaryPaths(HostBinaries)).
	Binaries []string
	// Kubernetes is the directory of the Kubernetes payload that
	// build/kubernetes builds, carried at KubernetesBin; empty leaves
	// Kubernetes out.
	Kubernetes string
	// Modules is the kernel's module directory as Cairn carries it,
	// placed at ModulesDir/<release>; nil leaves modules out.
	Modules *modules.Set
	// MkfsEROFS is erofs-utils' mkfs.erofs; "mkfs.erofs" (looked up in
	// PATH) when empty.
	MkfsEROFS string
	// TempDir is where the staging directory is made; os.TempDir() when
	// empty.
	TempDir string
}

// An Image is the result of Build.
type Image struct {
	// FilesystemSize is the length of the EROFS image in bytes, a whole
	// number of verity blocks.
	FilesystemSize int64
	// TreeSize is the length of the hash tree after it.
	TreeSize int64
	// Params are the verity parameters for the node's command line.
	Params verity.Params
	// HostFiles are the files of the build machine that went in, for a
	// make rule that rebuilds the image when one changes.
	HostFiles []string
	// KubernetesFiles are the files of the Kubernetes payload that went
	// in, for the same make rule.
	KubernetesFiles []string
	// KubernetesSize is the size of the Kubernetes payload's programs
	// before compression, 0 without it.
	KubernetesSize int64
}

// Build writes the system image to path: the EROFS filesystem, then its
// verity hash tree.
func Build(path string, c Config) (*Image, error) {
	if c.MkfsEROFS == "" {
		c.MkfsEROFS = "mkfs.erofs"
	}
	closure, err := elfdeps.Resolve(c.Binaries)
	if err != nil {
		return nil, fmt.Errorf("when resolving host binaries: %w", err)
	}
	if err := checkLoaderLinks(closure, c.Binaries); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(c.TempDir, "cairn-system-")
	if err != nil {
		return nil, fmt.Errorf("when making the staging directory: %w", err)
	}
	defer os.RemoveAll(stage)
	img := &Image{}
	for _, f := range closure.Files {
		img.HostFiles = append(img.HostFiles, f.Path)
	}
	if err := stageFiles(stage, closure.Files); err != nil {
		return nil, err
	}
	if c.Modules != nil {
		if err := stageModules(stage, c.Modules); err != nil {
			return nil, err
		}
	}
	if c.Kubernetes != "" {
		img.KubernetesFiles, img.KubernetesSize, err = stagePayload(stage, c.Kubernetes, KubernetesBin)
		if err != nil {
			return nil, err
		}
	}

	tmp := path + ".tmp"
	os.Remove(tmp)
	defer os.Remove(tmp)
	cmd := exec.Command(c.MkfsEROFS, append(mkfsArgs[:len(mkfsArgs):len(mkfsArgs)], tmp, stage)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("when running %s: %w: %s", c.MkfsEROFS, err, bytes.TrimSpace(out))
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("when opening the filesystem image: %w", err)
	}
	defer f.Close()
	if img.FilesystemSize, err = padToBlock(f); err != nil {
		return nil, err
	}
	salt, err := deriveSalt(f)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("when rewinding the filesystem image: %w", err)
	}
	tree, err := verity.Compute(f, salt)
	if err != nil {
		return nil, fmt.Errorf("when computing the hash tree: %w", err)
	}
	img.Params = tree.Params(salt)
	img.TreeSize = int64(len(tree.Hashes))
	if _, err := f.WriteAt(tree.Hashes, img.FilesystemSize); err != nil {
		return nil, fmt.Errorf("when writing the hash tree: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("when closing the system image: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("when renaming the system image into place: %w", err)
	}
	return img, nil
}

// stageFiles puts files below stage at their own paths: regular files
// with their permission bits, symlinks as they are, directories 0755.
func stageFiles(stage string, files []elfdeps.File) error {
	if err := os.Chmod(stage, 0o755); err != nil {
		return fmt.Errorf("when staging: %w", err)
	}
	for _, f := range files {
		dst := filepath.Join(stage, f.Path)
		if err := mkdirs(stage, filepath.Dir(dst)); err != nil {
			return err
		}
		if f.Link != "" {
			if err := os.Symlink(f.Link, dst); err != nil {
				return fmt.Errorf("when staging %s: %w", f.Path, err)
			}
			continue
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return fmt.Errorf("when reading %s: %w", f.Path, err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			return fmt.Errorf("when staging %s: %w", f.Path, err)
		}
		// Set after writing: the umask does not apply to chmod.
		if err := os.Chmod(dst, f.Mode.Perm()); err != nil {
			return fmt.Errorf("when staging %s: %w", f.Path, err)
		}
	}
	return nil
}

// stageModules writes the module set below ModulesDir/<release>.
func stageModules(stage string, s *modules.Set) error {
	base := filepath.Join(stage, ModulesDir, s.Release)
	for _, f := range s.Files {
		dst := filepath.Join(base, filepath.FromSlash(f.Name))
		if err := mkdirs(stage, filepath.Dir(dst)); err != nil {
			return err
		}
		if err := os.WriteFile(dst, f.Data, 0o644); err != nil {
			return fmt.Errorf("when staging module file %s: %w", f.Name, err)
		}
		if err := os.Chmod(dst, 0o644); err != nil {
			return fmt.Errorf("when staging module file %s: %w", f.Name, err)
		}
	}
	return nil
}

// mkdirs makes dir and its parents below stage, each 0755 whatever the
// umask.
func mkdirs(stage, dir string) error {
	if dir == stage || len(dir) < len(stage) {
		return nil
	}
	if err := mkdirs(stage, filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("when staging: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("when staging: %w", err)
	}
	return nil
}

// padToBlock extends f with zeros to a whole number of verity blocks and
// returns its new length.
func padToBlock(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("when sizing the filesystem image: %w", err)
	}
	size := (st.Size() + verity.BlockSize - 1) / verity.BlockSize * verity.BlockSize
	if size != st.Size() {
		if err := f.Truncate(size); err != nil {
			return 0, fmt.Errorf("when padding the filesystem image: %w", err)
		}
	}
	return size, nil
}

// deriveSalt hashes the filesystem image into the verity salt: another
// image gets another salt, the same image the same one.
func deriveSalt(r io.ReaderAt) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(saltLabel))
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, 1<<62)); err != nil {
		return nil, fmt.Errorf("when hashing the filesystem image: %w", err)
	}
	return h.Sum(nil), nil
}

// Cmdline returns the kernel command line base with the flag that pins
// the system image's content. It names no slot: the unified kernel image
// that carries it is signed and boots from either slot, and the node
// mounts the slot whose content matches (cmd/init, whose tests parse this
// form).
func Cmdline(base string, p verity.Params) string {
	return strings.TrimSpace(base) + " " + VerityFlag + "=" + p.String()
}

// VerityFlag is the flag of the kernel command line that holds the system
// image's verity parameters, in the text form of verity.Params.
const VerityFlag = "cairn.verity"
