package elfdeps

import (
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultSearchDirs are the directories Debian's amd64 loader searches when
// it has no ld.so.cache, in its order ("ld.so --help" lists them). /lib64
// is not among them: only the interpreter lives there.
var DefaultSearchDirs = []string{
	"/lib/x86_64-linux-gnu",
	"/usr/lib/x86_64-linux-gnu",
	"/lib",
	"/usr/lib",
}

// maxLinks bounds a chain of symlinks, as the kernel's ELOOP does.
const maxLinks = 40

// maxInterp bounds the length of a PT_INTERP path read from a binary.
const maxInterp = 4096

// A File is one path the loader opens, or one a symlink on the way points
// to. Its Path is the same on the host and in the image.
type File struct {
	// Path is absolute and not resolved: "/lib/x86_64-linux-gnu/libc.so.6".
	Path string
	// Link is a symlink's target as the host spells it, relative or
	// absolute; empty for a regular file.
	Link string
	// Mode is a regular file's permission bits.
	Mode fs.FileMode
}

// A Closure is what the loader needs to start a set of binaries.
type Closure struct {
	// Libraries are the paths at which the loader finds the interpreter
	// and every needed library, sorted; what ldd prints after "=>".
	Libraries []string
	// Files are the binaries, the libraries and the symlink targets on the
	// way to their contents, sorted by Path, each once.
	Files []File
}

// An Option changes how Resolve searches.
type Option func(*resolver)

// WithSearchDirs replaces DefaultSearchDirs.
func WithSearchDirs(dirs ...string) Option {
	return func(r *resolver) { r.searchDirs = dirs }
}

type resolver struct {
	searchDirs []string
	files      map[string]File
	libraries  map[string]bool
	// sonames maps the DT_SONAME of every object read so far to its path:
	// the loader takes an already loaded object for a needed name equal
	// to its soname (libc.so.6 needs the interpreter by its soname).
	sonames map[string]string
}

// Resolve returns the binaries, their interpreters and the closure of their
// DT_NEEDED libraries. Binaries are absolute paths. A library found in no
// directory is an error naming it and the object that needs it.
func Resolve(binaries []string, opts ...Option) (*Closure, error) {
	r := &resolver{
		searchDirs: DefaultSearchDirs,
		files:      map[string]File{},
		libraries:  map[string]bool{},
		sonames:    map[string]string{},
	}
	for _, o := range opts {
		o(r)
	}
	queue := []string{}
	for _, bin := range binaries {
		if !filepath.IsAbs(bin) {
			return nil, fmt.Errorf("binary %q: path is not absolute", bin)
		}
		queue = append(queue, filepath.Clean(bin))
	}
	done := map[string]bool{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if done[p] {
			continue
		}
		done[p] = true
		if err := r.addPath(p); err != nil {
			return nil, err
		}
		deps, err := r.dependencies(p)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			r.libraries[d] = true
			queue = append(queue, d)
		}
	}
	return r.closure(), nil
}

func (r *resolver) closure() *Closure {
	c := &Closure{}
	for p := range r.libraries {
		c.Libraries = append(c.Libraries, p)
	}
	slices.Sort(c.Libraries)
	for _, f := range r.files {
		c.Files = append(c.Files, f)
	}
	slices.SortFunc(c.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return c
}

// dependencies returns the paths of the interpreter and the libraries the
// object at p names, in the order it names them.
func (r *resolver) dependencies(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", p, err)
	}
	defer f.Close()
	var deps []string
	interp, err := interpreter(f)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", p, err)
	}
	if interp != "" {
		deps = append(deps, interp)
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("when reading DT_NEEDED of %s: %w", p, err)
	}
	soname, err := f.DynString(elf.DT_SONAME)
	if err != nil {
		return nil, fmt.Errorf("when reading DT_SONAME of %s: %w", p, err)
	}
	if len(soname) > 0 {
		if _, ok := r.sonames[soname[0]]; !ok {
			r.sonames[soname[0]] = p
		}
	}
	dirs, err := r.dirsFor(f, p)
	if err != nil {
		return nil, err
	}
	for _, name := range needed {
		if loaded, ok := r.sonames[name]; ok {
			deps = append(deps, loaded)
			continue
		}
		lib, err := find(f, name, dirs)
		if err != nil {
			return nil, fmt.Errorf("%s needs %s: %w", p, name, err)
		}
		deps = append(deps, lib)
	}
	return deps, nil
}

// interpreter returns the PT_INTERP path of f, or "" when it has none.
func interpreter(f *elf.File) (string, error) {
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		if prog.Filesz == 0 || prog.Filesz > maxInterp {
			return "", fmt.Errorf("PT_INTERP of %d bytes", prog.Filesz)
		}
		data, err := io.ReadAll(prog.Open())
		if err != nil {
			return "", fmt.Errorf("when reading PT_INTERP: %w", err)
		}
		if uint64(len(data)) != prog.Filesz {
			return "", fmt.Errorf("PT_INTERP is truncated")
		}
		interp := strings.TrimRight(string(data), "\x00")
		if !filepath.IsAbs(interp) {
			return "", fmt.Errorf("PT_INTERP %q is not an absolute path", interp)
		}
		return filepath.Clean(interp), nil
	}
	return "", nil
}

// dirsFor returns the directories searched for the libraries the object f
// at p needs: DT_RPATH unless there is a DT_RUNPATH, DT_RUNPATH, then the
// defaults. $ORIGIN is the object's directory.
func (r *resolver) dirsFor(f *elf.File, p string) ([]string, error) {
	runpath, err := f.DynString(elf.DT_RUNPATH)
	if err != nil {
		return nil, fmt.Errorf("when reading DT_RUNPATH of %s: %w", p, err)
	}
	rpath, err := f.DynString(elf.DT_RPATH)
	if err != nil {
		return nil, fmt.Errorf("when reading DT_RPATH of %s: %w", p, err)
	}
	lists := runpath
	if len(runpath) == 0 {
		lists = rpath
	}
	var dirs []string
	for _, list := range lists {
		for _, dir := range strings.Split(list, ":") {
			dir, err := expandOrigin(dir, filepath.Dir(p))
			if err != nil {
				return nil, fmt.Errorf("in the search path of %s: %w", p, err)
			}
			if dir != "" {
				dirs = append(dirs, dir)
			}
		}
	}
	return append(dirs, r.searchDirs...), nil
}

// expandOrigin replaces $ORIGIN and ${ORIGIN} in dir. The loader's other
// tokens ($LIB, $PLATFORM) depend on the machine that runs the binary, so
// they are refused rather than guessed.
func expandOrigin(dir, origin string) (string, error) {
	dir = strings.ReplaceAll(dir, "${ORIGIN}", origin)
	dir = strings.ReplaceAll(dir, "$ORIGIN", origin)
	if strings.Contains(dir, "$") {
		return "", fmt.Errorf("directory %q: only $ORIGIN is supported", dir)
	}
	if dir != "" && !filepath.IsAbs(dir) {
		return "", fmt.Errorf("directory %q is not absolute", dir)
	}
	return dir, nil
}

// find returns the first path in dirs holding name that is an ELF object
// of the same class and machine as f. A name with a slash is a path.
func find(f *elf.File, name string, dirs []string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("relative path %q", name)
		}
		if !compatible(f, name) {
			return "", fmt.Errorf("%s is not a matching ELF object", name)
		}
		return filepath.Clean(name), nil
	}
	for _, dir := range dirs {
		candidate := filepath.Join(dir, name)
		if compatible(f, candidate) {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(dirs, ":"))
}

// compatible tells whether p is an ELF object the loader would accept for
// f: one of its class and machine.
func compatible(f *elf.File, p string) bool {
	lib, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer lib.Close()
	return lib.Class == f.Class && lib.Machine == f.Machine
}

// addPath records p and, when p is a symlink, the chain of symlinks to the
// regular file it ends at. A relative target is read against p's own
// directory as written, which is how it resolves in the image; if that
// differs from the host's resolution (a ".." through a directory symlink)
// the image would not match the host, so that is an error.
func (r *resolver) addPath(p string) error {
	for hops := 0; ; hops++ {
		if _, ok := r.files[p]; ok {
			return nil
		}
		if hops > maxLinks {
			return fmt.Errorf("when following %s: too many symlinks", p)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("when carrying %s: %w", p, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("when following %s: %w", p, err)
			}
			next := target
			if !filepath.IsAbs(next) {
				next = filepath.Join(filepath.Dir(p), target)
			}
			if err := sameFile(p, next); err != nil {
				return err
			}
			r.files[p] = File{Path: p, Link: target}
			p = filepath.Clean(next)
		case fi.Mode().IsRegular():
			r.files[p] = File{Path: p, Mode: fi.Mode().Perm()}
			return nil
		default:
			return fmt.Errorf("when carrying %s: not a regular file or symlink (%s)", p, fi.Mode().Type())
		}
	}
}

// sameFile checks that the symlink link and the path next lead to the same
// file on the host.
func sameFile(link, next string) error {
	a, err := os.Stat(link)
	if err != nil {
		return fmt.Errorf("when following %s: %w", link, err)
	}
	b, err := os.Stat(next)
	if err != nil {
		return fmt.Errorf("when following %s: %w", link, err)
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("symlink %s resolves elsewhere than %s, where the image would put it", link, next)
	}
	return nil
}
