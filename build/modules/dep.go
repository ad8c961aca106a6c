package modules

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// Dep is the content of modules.dep: each module's path, relative to the
// module directory ("kernel/fs/xfs/xfs.ko"), mapped to the paths of the
// modules it needs loaded first.
type Dep map[string][]string

// ParseDep reads modules.dep: lines "<path>: <dependency path> ...".
func ParseDep(r io.Reader) (Dep, error) {
	dep := Dep{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		file, deps, ok := strings.Cut(line, ":")
		file = strings.TrimSpace(file)
		if !ok || file == "" || strings.ContainsAny(file, " \t") {
			return nil, fmt.Errorf("modules.dep line %d: want \"<path>: <dependency paths>\", got %q", n, line)
		}
		if _, dup := dep[file]; dup {
			return nil, fmt.Errorf("modules.dep line %d: %s listed twice", n, file)
		}
		dep[file] = strings.Fields(deps)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("when reading modules.dep: %w", err)
	}
	return dep, nil
}

// Select returns, sorted, the modules of dep whose path below kernel/
// starts with one of the prefixes. A prefix that matches no module is an
// error: it names a module this kernel does not have.
func Select(dep Dep, prefixes []Prefix) ([]string, error) {
	chosen := map[string]bool{}
	for _, p := range prefixes {
		matched := false
		for file := range dep {
			if strings.HasPrefix(strings.TrimPrefix(file, "kernel/"), p.Path) {
				chosen[file] = true
				matched = true
			}
		}
		if !matched {
			return nil, fmt.Errorf("no module matches %q (%s)", p.Path, p.Why)
		}
	}
	return sortedKeys(chosen), nil
}

// Closure returns roots together with every module they need, directly or
// through other modules, sorted. A root or dependency that modules.dep does
// not list is an error: the kernel could not load the set.
func Closure(dep Dep, roots []string) ([]string, error) {
	seen := map[string]bool{}
	// Walk iteratively: modules.dep comes from outside, and a cycle or a
	// deep chain must neither recurse without bound nor loop.
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		file := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[file] {
			continue
		}
		deps, ok := dep[file]
		if !ok {
			return nil, fmt.Errorf("%s is not in modules.dep", file)
		}
		seen[file] = true
		for _, d := range deps {
			if _, ok := dep[d]; !ok {
				return nil, fmt.Errorf("%s needs %s, which is not in modules.dep", file, d)
			}
			if !seen[d] {
				stack = append(stack, d)
			}
		}
	}
	return sortedKeys(seen), nil
}

// Name returns the name the kernel gives the module in file:
// "kernel/drivers/char/hw_random/virtio-rng.ko.xz" is "virtio_rng".
func Name(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// Uncompressed returns file with a compression suffix (.xz, .zst, .gz)
// removed: the name the module has once the build decompressed it.
func Uncompressed(file string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(file, ".ko"+ext) {
			return strings.TrimSuffix(file, ext)
		}
	}
	return file
}

// Format writes dep restricted to the given modules in modules.dep's
// format, sorted by path, with every path passed through rename.
func (dep Dep) Format(modules []string, rename func(string) string) []byte {
	var b strings.Builder
	for _, file := range slices.Sorted(slices.Values(modules)) {
		b.WriteString(rename(file))
		b.WriteString(":")
		for _, d := range dep[file] {
			b.WriteString(" ")
			b.WriteString(rename(d))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
