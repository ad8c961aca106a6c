// Command envsh is sh in the test images built on busybox: busybox's
// ash, the shell of upstream's busybox image, whose messages the tests
// compare ("/bin/sh: can't create /file: Read-only file system"), unless
// the environment holds a variable whose name is not an identifier. Those
// Debian's busybox 1.35 ash drops from its commands' environment, where
// upstream's 1.37 passes them on, and the tests give containers such
// names ("1-data-1", "$_-data-1") and read them back with `sh -c env`; for
// them envsh runs bash, which passes them on.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	busybox = "/bin/busybox"
	bash    = "/usr/bin/bash"
)

func main() {
	prog, args := busybox, os.Args
	// busybox runs the applet its first argument names: sh, or -sh for a
	// login shell.
	if filepath.Base(strings.TrimPrefix(args[0], "-")) != "sh" {
		args = append([]string{"sh"}, args[1:]...)
	}
	env := os.Environ()
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !identifier(name) {
			prog, args = bash, os.Args
			break
		}
	}
	err := syscall.Exec(prog, args, env)
	fmt.Fprintf(os.Stderr, "%s: cannot run %s: %v\n", os.Args[0], prog, err)
	os.Exit(127)
}

// identifier tells whether name is a shell variable's name: a letter or
// underscore, then letters, digits and underscores.
func identifier(name string) bool {
	for i, c := range name {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return name != ""
}
