package system

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// KubernetesBin is where the image carries the Kubernetes payload
// (build/kubernetes: hyperkube and its links, containerd, runc, the CNI
// plugins), below MountPoint.
const KubernetesBin = "/kubernetes/bin"

// ImageArchiveSuffix ends the name of an OCI image archive of the payload,
// like the pause image that containerd imports at start.
const ImageArchiveSuffix = ".oci.tar"

// stagePayload copies src, a directory of static programs, links to them,
// image archives and directories of the same, to dst below stage. It
// returns the host paths it read and their bytes.
//
// A dynamically linked program fails: the image carries libraries only
// for HostBinaries, so it could not start on the node. A link must name a
// program next to it: an absolute target would point outside the system
// partition on the node.
func stagePayload(stage, src, dst string) (files []string, size int64, err error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the payload: %w", err)
	}
	dir := filepath.Join(stage, dst)
	if err := mkdirs(stage, dir); err != nil {
		return nil, 0, err
	}
	for _, e := range entries {
		path := filepath.Join(src, e.Name())
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return nil, 0, fmt.Errorf("when staging %s: %w", path, err)
			}
			if strings.Contains(target, "/") {
				return nil, 0, fmt.Errorf("payload link %s points to %s: it may only name a program next to it", path, target)
			}
			if st, err := os.Lstat(filepath.Join(src, target)); err != nil || !st.Mode().IsRegular() {
				return nil, 0, fmt.Errorf("payload link %s points to %s, which is not a program of the payload", path, target)
			}
			if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
				return nil, 0, fmt.Errorf("when staging %s: %w", path, err)
			}
		case e.Type().IsRegular():
			// An OCI image archive (the pause image) is data, not a
			// program.
			if !strings.HasSuffix(e.Name(), ImageArchiveSuffix) {
				if err := checkStatic(path); err != nil {
					return nil, 0, err
				}
			}
			n, err := copyFile(filepath.Join(dir, e.Name()), path)
			if err != nil {
				return nil, 0, fmt.Errorf("when staging %s: %w", path, err)
			}
			size += n
		case e.IsDir():
			sub, n, err := stagePayload(stage, path, filepath.Join(dst, e.Name()))
			if err != nil {
				return nil, 0, err
			}
			files, size = append(files, sub...), size+n
			continue
		default:
			return nil, 0, fmt.Errorf("payload entry %s is neither a program, a link nor a directory", path)
		}
		files = append(files, path)
	}
	return files, size, nil
}

// checkStatic fails unless path is an ELF program that needs neither a
// loader nor a library.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("payload program %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("payload program %s is dynamically linked: it would need a loader on the node", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("payload program %s: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("payload program %s needs %s: the node has no libraries for it", path, strings.Join(libs, ", "))
	}
	return nil
}

// copyFile copies src to a new file dst with src's permission bits and
// returns the bytes copied.
func copyFile(dst, src string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	// Set after writing: the umask does not apply to chmod.
	return n, os.Chmod(dst, st.Mode().Perm())
}
