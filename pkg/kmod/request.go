package kmod

import (
	"errors"
	"fmt"
	"strings"
)

// Resolve returns the modules that a request for name stands for, read
// the way modprobe reads it: name itself when it names a module of the
// index or one built into the kernel ("nls_cp437", "dm-crypt"), otherwise
// the modules of every alias whose pattern matches it ("crypto-ecb",
// "fs-xfs", "char-major-10-236"), in the order of modules.alias. It
// returns nothing for a name that neither knows.
func (x *Index) Resolve(name string) []string {
	if name == "" {
		return nil
	}
	// A module name has no '/'; moduleName would take such a name's
	// last element, a module the request never named.
	if m := moduleName(name); !strings.Contains(name, "/") && (x.Builtin[m] || x.Modules[m] != nil) {
		return []string{m}
	}
	return x.Aliases.Match(name)
}

// Request loads what a request for name resolves to (Index.Resolve),
// each module after its dependencies: what the kernel asks for when it
// runs modprobe through request_module. Like modprobe, it tries every
// module an alias leads to, since some of them drive hardware the machine
// lacks (an alias "crypto-aes" leads to the AES-NI and the VIA PadLock
// modules). It succeeds when one of them is loaded, built in or loaded
// already; it returns an error wrapping ErrNotFound when name resolves to
// nothing, and the failures of every module otherwise.
func (l *Loader) Request(name string) error {
	modules := l.index.Resolve(name)
	if len(modules) == 0 {
		return fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	var errs []error
	for _, m := range modules {
		if err := l.Load(m); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(modules) {
		return fmt.Errorf("when loading the modules for %s: %w", name, errors.Join(errs...))
	}
	return nil
}
