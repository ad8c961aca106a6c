package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Names in the configuration directory besides the default context's files
// (see the package documentation).
const (
	// contextsDir holds one directory per named context.
	contextsDir = "contexts"
	// currentContextFile names the context in use.
	currentContextFile = "current-context"
	// defaultContext is the context whose files lie in the configuration
	// directory itself: the only one before contexts existed.
	defaultContext = "default"
)

// contextFiles are the files of a context, with their modes.
var contextFiles = []struct {
	name string
	perm os.FileMode
}{
	{ownerKeyFile, 0o600},
	{ownerCertFile, 0o644},
	{caCertFile, 0o644},
	{settingsFile, 0o644},
}

// contextNamePattern is what a context may be called: a file name that
// is not hidden, without separators.
var contextNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func checkContextName(name string) error {
	if !contextNamePattern.MatchString(name) {
		return fmt.Errorf("%q is not a context name (letters, digits, '.', '_' and '-', starting with a letter or digit)", name)
	}
	return nil
}

// root returns the configuration directory: --config, or cairnctl under
// the user's configuration directory ($XDG_CONFIG_HOME or ~/.config).
func (a *app) root() (string, error) {
	if a.configDir != "" {
		return a.configDir, nil
	}
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("when finding the configuration directory (set --config): %w", err)
	}
	return filepath.Join(base, "cairnctl"), nil
}

// contextInUse returns the configuration directory and the name of the
// context commands use: --context, else the one current-context names,
// else the default context.
func (a *app) contextInUse() (root, name string, err error) {
	if root, err = a.root(); err != nil {
		return "", "", err
	}
	if a.context != "" {
		return root, a.context, nil
	}
	name, err = currentContext(root)
	return root, name, err
}

// dir returns the directory of the context in use, where its owner key,
// certificates and settings are.
func (a *app) dir() (string, error) {
	root, name, err := a.contextInUse()
	if err != nil {
		return "", err
	}
	return contextDir(root, name)
}

// currentContext reads which context root selects: the default context
// when it selects none.
func currentContext(root string) (string, error) {
	p := filepath.Join(root, currentContextFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return defaultContext, nil
	}
	if err != nil {
		return "", fmt.Errorf("when reading the current context: %w", err)
	}
	name := strings.TrimSpace(string(data))
	if name == "" {
		return defaultContext, nil
	}
	if err := checkContextName(name); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return name, nil
}

// contextDir returns the directory of context name of root. The default
// context is root itself; any other must exist.
func contextDir(root, name string) (string, error) {
	if name == defaultContext {
		return root, nil
	}
	if err := checkContextName(name); err != nil {
		return "", err
	}
	dir := filepath.Join(root, contextsDir, name)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s has no context %q (`cairnctl config contexts` lists them)", root, name)
	}
	return dir, nil
}

// holdsContext says whether dir holds any file of a context.
func holdsContext(dir string) bool {
	for _, f := range contextFiles {
		if _, err := os.Stat(filepath.Join(dir, f.name)); err == nil {
			return true
		}
	}
	return false
}

// listContexts returns the names of root's contexts, sorted: the default
// context among them when it holds anything or is current.
func listContexts(root, current string) ([]string, error) {
	var names []string
	if current == defaultContext || holdsContext(root) {
		names = append(names, defaultContext)
	}
	entries, err := os.ReadDir(filepath.Join(root, contextsDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("when listing contexts: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && checkContextName(e.Name()) == nil && e.Name() != defaultContext {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// useContext makes name the context root selects.
func useContext(root, name string) error {
	if _, err := contextDir(root, name); err != nil {
		return err
	}
	return writeFileAtomic(root, currentContextFile, []byte(name+"\n"), 0o644)
}

// addContext makes context name of root: empty when from is "", which
// refuses to replace a context of that name, or else a copy of the
// context that the configuration directory from uses, replacing any
// context of that name. It returns the context's directory.
func addContext(root, name, from string) (string, error) {
	if name == defaultContext {
		return "", fmt.Errorf("the context %q is the configuration directory itself; choose another name", defaultContext)
	}
	if err := checkContextName(name); err != nil {
		return "", err
	}
	var src string
	if from != "" {
		fromName, err := currentContext(from)
		if err != nil {
			return "", err
		}
		if src, err = contextDir(from, fromName); err != nil {
			return "", err
		}
		if !holdsContext(src) {
			return "", fmt.Errorf("%s holds no owner key, certificate or settings to copy", src)
		}
	}
	parent := filepath.Join(root, contextsDir)
	dir := filepath.Join(parent, name)
	_, err := os.Stat(dir)
	exists := err == nil
	if exists && from == "" {
		return "", fmt.Errorf("%s already has a context %q (add-context --from DIR replaces it)", root, name)
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("when creating %s: %w", parent, err)
	}
	// Build the new context beside the old one, then swap them, so that
	// a failure leaves the old one whole.
	fresh, err := os.MkdirTemp(parent, "."+name+".new-*")
	if err != nil {
		return "", fmt.Errorf("when creating context %q: %w", name, err)
	}
	defer os.RemoveAll(fresh)
	if src != "" {
		for _, f := range contextFiles {
			data, err := os.ReadFile(filepath.Join(src, f.name))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("when copying context %q: %w", name, err)
			}
			if err := writeFileAtomic(fresh, f.name, data, f.perm); err != nil {
				return "", err
			}
		}
	}
	old := fresh + ".old"
	if exists {
		if err := os.Rename(dir, old); err != nil {
			return "", fmt.Errorf("when replacing context %q: %w", name, err)
		}
	}
	if err := os.Rename(fresh, dir); err != nil {
		if exists {
			// Put the old one back.
			os.Rename(old, dir)
		}
		return "", fmt.Errorf("when creating context %q: %w", name, err)
	}
	if exists {
		os.RemoveAll(old)
	}
	return dir, nil
}
