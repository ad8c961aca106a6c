package kmod

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Logger receives a line for every module loaded (Infof) and every module
// that failed to load (Warningf). logtree.LeveledLogger is one.
type Logger interface {
	Infof(format string, args ...any)
	Warningf(format string, args ...any)
}

// LoadFunc hands an opened module file to the kernel. FinitModule is the
// real one; tests pass a fake.
type LoadFunc func(f *os.File, params string, flags int) error

// FinitModule loads the module in f with finit_module(2).
func FinitModule(f *os.File, params string, flags int) error {
	return unix.FinitModule(int(f.Fd()), params, flags)
}

// ErrNotFound is returned by Loader.Load for a name that is neither a
// module in modules.dep nor built into the kernel.
var ErrNotFound = errors.New("no such module")

type loadState uint8

const (
	stateUnknown loadState = iota
	stateLoading           // being loaded by some caller
	statePresent           // built in, or loaded before this Loader saw it
	stateLoaded            // loaded by this Loader
	stateFailed
)

// A Loader loads modules of one Index with their dependencies, each at
// most once. It is safe for concurrent use: a module that one caller is
// loading is waited for by the others, so that the kernel's waits (a
// controller probing its ports) overlap with other loads.
type Loader struct {
	index  *Index
	load   LoadFunc
	log    Logger
	params map[string]string

	mu     sync.Mutex
	state  map[string]loadState
	failed map[string]error
	// done holds a channel for each module being loaded, closed when
	// that load ends either way.
	done   map[string]chan struct{}
	loaded []string
}

// A LoaderOption changes a Loader made by NewLoader.
type LoaderOption func(*Loader)

// WithLoadFunc replaces finit_module(2), for tests.
func WithLoadFunc(f LoadFunc) LoaderOption {
	return func(l *Loader) { l.load = f }
}

// WithLogger sends a line for each loaded or failed module to log.
func WithLogger(log Logger) LoaderOption {
	return func(l *Loader) { l.log = log }
}

// WithParams gives modules their parameters when this Loader loads them:
// params maps a module's name to a parameter string as finit_module(2)
// takes it ("name=value", separated by spaces). A module loaded before,
// or built in, keeps the parameters it has.
func WithParams(params map[string]string) LoaderOption {
	return func(l *Loader) { l.params = params }
}

// WithPresent names modules that are loaded already (see ReadProcModules),
// so the Loader does not try them again.
func WithPresent(names ...string) LoaderOption {
	return func(l *Loader) {
		for _, n := range names {
			l.state[moduleName(n)] = statePresent
		}
	}
}

// NewLoader returns a Loader for the modules of index.
func NewLoader(index *Index, opts ...LoaderOption) *Loader {
	l := &Loader{
		index:  index,
		load:   FinitModule,
		log:    discard{},
		state:  make(map[string]loadState),
		failed: make(map[string]error),
		done:   make(map[string]chan struct{}),
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Loaded returns the modules this Loader has loaded, in order.
func (l *Loader) Loaded() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.loaded...)
}

// Has reports whether name is a module of the index or built in.
func (l *Loader) Has(name string) bool {
	name = moduleName(name)
	return l.index.Builtin[name] || l.index.Modules[name] != nil
}

// Match returns the modules whose aliases match modalias.
func (l *Loader) Match(modalias string) []string {
	return l.index.Aliases.Match(modalias)
}

// Resolve returns the modules a request for name stands for
// (Index.Resolve).
func (l *Loader) Resolve(name string) []string {
	return l.index.Resolve(name)
}

// Load loads the module name after its dependencies. A module that is
// built in or already loaded is no error. A failure is logged once, where
// it happens, and returned to every caller that needed that module. A
// module another caller is loading is waited for.
func (l *Loader) Load(name string) error {
	name = moduleName(name)
	if l.index.Builtin[name] {
		return nil
	}
	m := l.index.Modules[name]
	l.mu.Lock()
	switch l.state[name] {
	case statePresent, stateLoaded:
		l.mu.Unlock()
		return nil
	case stateFailed:
		err := l.failed[name]
		l.mu.Unlock()
		return err
	case stateLoading:
		done := l.done[name]
		l.mu.Unlock()
		<-done
		return l.Load(name)
	}
	if m == nil {
		l.mu.Unlock()
		return fmt.Errorf("module %s: %w", name, ErrNotFound)
	}
	// modules.dep lists every module's whole closure, so a cycle shows
	// as a dependency that needs the module back. Caught here, before
	// anyone waits for anyone, it cannot deadlock two callers.
	for _, d := range m.Deps {
		if dm := l.index.Modules[d]; dm != nil && (d == name || slices.Contains(dm.Deps, name)) {
			err := fmt.Errorf("module %s: dependency cycle through %s", name, d)
			l.failLocked(name, err)
			l.mu.Unlock()
			return err
		}
	}
	l.state[name] = stateLoading
	done := make(chan struct{})
	l.done[name] = done
	l.mu.Unlock()
	// By now the state is loaded, present or failed.
	defer func() {
		l.mu.Lock()
		delete(l.done, name)
		l.mu.Unlock()
		close(done)
	}()

	for _, d := range m.Deps {
		if err := l.Load(d); err != nil {
			return l.fail(name, fmt.Errorf("module %s needs %s: %w", name, d, err))
		}
	}
	if err := l.loadFile(m); err != nil {
		return l.fail(name, fmt.Errorf("module %s: %w", name, err))
	}
	return nil
}

func (l *Loader) fail(name string, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(name, err)
	return err
}

func (l *Loader) failLocked(name string, err error) {
	l.state[name] = stateFailed
	l.failed[name] = err
	l.log.Warningf("loading module %s failed: %v", name, err)
}

// loadFile hands m's file to the kernel. EEXIST means that the module was
// loaded by someone else meanwhile, which is as good as loading it.
func (l *Loader) loadFile(m *Module) error {
	p := m.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(l.index.Dir, p)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if compressed(p) {
		// The kernel decompresses the file itself; kernels built without
		// CONFIG_MODULE_DECOMPRESS refuse such a file.
		flags |= unix.MODULE_INIT_COMPRESSED_FILE
	}
	params := l.params[m.Name]
	err = l.load(f, params, flags)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, unix.EEXIST):
		l.state[m.Name] = statePresent
		return nil
	case err != nil:
		return fmt.Errorf("finit_module: %w", err)
	}
	l.state[m.Name] = stateLoaded
	l.loaded = append(l.loaded, m.Name)
	if params != "" {
		l.log.Infof("loaded module %s (%s)", m.Name, params)
	} else {
		l.log.Infof("loaded module %s", m.Name)
	}
	return nil
}

func compressed(path string) bool {
	for _, s := range []string{".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(path, s) {
			return true
		}
	}
	return false
}

// ReadProcModules returns the names of the loaded modules listed in r, the
// contents of /proc/modules: one module a line, its name first.
func ReadProcModules(r io.Reader) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("when reading loaded modules: %w", err)
	}
	return names, nil
}

type discard struct{}

func (discard) Infof(string, ...any)    {}
func (discard) Warningf(string, ...any) {}
