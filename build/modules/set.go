package modules

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// A File is one file of the carried module directory.
type File struct {
	// Name is the path relative to the module directory.
	Name string
	// Data is the file's content, decompressed for modules.
	Data []byte
}

// A Set is the carried part of one kernel's module directory.
type Set struct {
	// Release is the kernel release, the module directory's name
	// ("6.1.0-56-amd64").
	Release string
	// Modules are the carried modules' paths relative to the module
	// directory, as they are carried (decompressed), sorted.
	Modules []string
	// ModuleBytes is the size of all carried modules together.
	ModuleBytes int64
	// Files are the modules and the restricted indexes (modules.dep,
	// modules.alias, modules.softdep, modules.builtin), sorted by name.
	Files []File
}

// Load reads the module directory dir (".../lib/modules/<release>", with
// the modules.dep depmod wrote), selects the modules matching prefixes,
// adds their dependencies and returns the set with restricted indexes.
func Load(dir string, prefixes []Prefix) (*Set, error) {
	depFile, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("when opening modules.dep: %w", err)
	}
	dep, err := ParseDep(depFile)
	depFile.Close()
	if err != nil {
		return nil, err
	}
	roots, err := Select(dep, prefixes)
	if err != nil {
		return nil, fmt.Errorf("when selecting modules: %w", err)
	}
	chosen, err := Closure(dep, roots)
	if err != nil {
		return nil, fmt.Errorf("when adding module dependencies: %w", err)
	}

	s := &Set{Release: filepath.Base(dir)}
	names := map[string]bool{}
	for _, file := range chosen {
		data, err := readModule(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		name := Uncompressed(file)
		s.Modules = append(s.Modules, name)
		s.ModuleBytes += int64(len(data))
		s.Files = append(s.Files, File{Name: name, Data: data})
		names[Name(file)] = true
	}

	s.Files = append(s.Files, File{Name: "modules.dep", Data: dep.Format(chosen, Uncompressed)})
	for _, idx := range []struct {
		name string
		// field is the index of the module name in a line's fields.
		field int
	}{{"modules.alias", 2}, {"modules.softdep", 1}} {
		data, err := filterIndex(filepath.Join(dir, idx.name), idx.field, names)
		if err != nil {
			return nil, err
		}
		s.Files = append(s.Files, File{Name: idx.name, Data: data})
	}
	builtin, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		return nil, fmt.Errorf("when reading modules.builtin: %w", err)
	}
	s.Files = append(s.Files, File{Name: "modules.builtin", Data: builtin})

	slices.SortFunc(s.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}

// readModule reads a module file, decompressing .xz, .zst and .gz: the
// kernel's finit_module accepts compressed modules only when built to, and
// the initramfs is compressed as a whole anyway.
func readModule(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("when reading module: %w", err)
	}
	var r io.Reader
	switch {
	case strings.HasSuffix(path, ".xz"):
		r, err = xz.NewReader(bytes.NewReader(raw))
	case strings.HasSuffix(path, ".zst"):
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderConcurrency(1))
		if err == nil {
			defer d.Close()
			r = d
		}
	case strings.HasSuffix(path, ".gz"):
		r, err = gzip.NewReader(bytes.NewReader(raw))
	default:
		return raw, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when decompressing %s: %w", path, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("when decompressing %s: %w", path, err)
	}
	return data, nil
}

// filterIndex keeps the lines of the index file whose field-th field names
// a carried module, and comments. A missing index is empty.
func filterIndex(path string, field int, names map[string]bool) ([]byte, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when opening %s: %w", filepath.Base(path), err)
	}
	defer f.Close()
	var out bytes.Buffer
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) > field && names[strings.ReplaceAll(fields[field], "-", "_")] {
			out.WriteString(line)
			out.WriteString("\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("when reading %s: %w", filepath.Base(path), err)
	}
	return out.Bytes(), nil
}
