package kmod

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A Module is one loadable module as modules.dep describes it.
type Module struct {
	// Name is the module's name as the kernel knows it: underscores, no
	// suffix ("virtio_pci").
	Name string
	// Path is the module file, relative to the module directory unless
	// modules.dep gave an absolute path.
	Path string
	// Deps are the names of the modules this one needs loaded first. depmod
	// lists them transitively already; Loader resolves them recursively all
	// the same and does not rely on that.
	Deps []string
}

// ParseDeps reads modules.dep: lines "<path>: <dependency path> ...". A
// module listed twice keeps its first line, as modprobe does.
func ParseDeps(r io.Reader) (map[string]*Module, error) {
	modules := make(map[string]*Module)
	err := eachLine(r, func(n int, line string) error {
		file, deps, ok := strings.Cut(line, ":")
		file = strings.TrimSpace(file)
		if !ok || file == "" || strings.ContainsAny(file, " \t") {
			return fmt.Errorf("line %d: want \"<module path>: <dependency paths>\", got %q", n, line)
		}
		m := &Module{Name: moduleName(file), Path: file}
		if m.Name == "" {
			return fmt.Errorf("line %d: no module name in %q", n, file)
		}
		for _, d := range strings.Fields(deps) {
			dep := moduleName(d)
			if dep == "" {
				return fmt.Errorf("line %d: no module name in dependency %q", n, d)
			}
			m.Deps = append(m.Deps, dep)
		}
		if _, dup := modules[m.Name]; !dup {
			modules[m.Name] = m
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("when parsing modules.dep: %w", err)
	}
	return modules, nil
}

// ParseBuiltin reads modules.builtin, the paths of the modules built into
// the kernel image, and returns their names.
func ParseBuiltin(r io.Reader) (map[string]bool, error) {
	builtin := make(map[string]bool)
	err := eachLine(r, func(n int, line string) error {
		if name := moduleName(line); name != "" {
			builtin[name] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("when parsing modules.builtin: %w", err)
	}
	return builtin, nil
}

// moduleName turns a module path or name into the name the kernel uses:
// "kernel/drivers/hid/hid-generic.ko.xz" becomes "hid_generic".
func moduleName(p string) string {
	name := path.Base(strings.TrimSpace(p))
	for _, suffix := range []string{".xz", ".zst", ".gz"} {
		name = strings.TrimSuffix(name, suffix)
	}
	name = strings.TrimSuffix(name, ".ko")
	if name == "." || name == "/" {
		return ""
	}
	return strings.ReplaceAll(name, "-", "_")
}

// An Index is what depmod knows about the modules of one kernel release:
// their files and dependencies, their aliases and the modules built into
// the kernel.
type Index struct {
	// Dir is the module directory, /lib/modules/<release>.
	Dir     string
	Modules map[string]*Module
	Builtin map[string]bool
	Aliases *AliasIndex
}

// Open reads modules.dep, modules.alias and modules.builtin from dir. The
// last one may be missing (a kernel with nothing built in that could have
// been a module); the first two may not.
func Open(dir string) (*Index, error) {
	x := &Index{Dir: dir}
	var err error
	if x.Modules, err = parseFile(dir, "modules.dep", ParseDeps); err != nil {
		return nil, err
	}
	aliases, err := parseFile(dir, "modules.alias", ParseAliases)
	if err != nil {
		return nil, err
	}
	x.Aliases = NewAliasIndex(aliases)
	x.Builtin, err = parseFile(dir, "modules.builtin", ParseBuiltin)
	if errors.Is(err, fs.ErrNotExist) {
		x.Builtin, err = map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	return x, nil
}

func parseFile[T any](dir, name string, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return zero, fmt.Errorf("when opening %s: %w", name, err)
	}
	defer f.Close()
	return parse(f)
}
