// Package cmdline reads the kernel command line, /proc/cmdline, the way the
// kernel itself splits it, so that PID 1 can take its own flags from the
// same line the boot loader wrote ("cairn.log=warning").
//
// Parameters are separated by spaces. A parameter is a key with or without
// "=value"; double quotes let a value (or a whole parameter) hold spaces
// and are not part of the result. As the kernel does, keys compare with
// '-' and '_' as the same character, so "cairn.test.root-fail" and
// "cairn.test.root_fail" are one flag. "--", which separates the kernel's
// parameters from init's, is skipped: init's own flags may stand on either
// side of it.
package cmdline

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A Param is one parameter of the command line.
type Param struct {
	Key string
	// Value is what follows the first '=', quotes removed.
	Value string
	// HasValue tells "key=" (an empty value) from "key" (none).
	HasValue bool
}

// Cmdline is a parsed command line, in order.
type Cmdline []Param

// Read parses /proc/cmdline.
func Read() (Cmdline, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, fmt.Errorf("when reading kernel command line: %w", err)
	}
	return Parse(string(b)), nil
}

// Parse splits a command line into parameters. Every input parses; an
// unbalanced quote runs to the end of the line, as in the kernel.
func Parse(s string) Cmdline {
	var c Cmdline
	for {
		s = strings.TrimLeft(s, " \t\n\r\v\f")
		if s == "" {
			return c
		}
		var arg string
		arg, s = nextArg(s)
		if arg == "--" {
			continue
		}
		c = append(c, splitParam(arg))
	}
}

// nextArg returns the first parameter of s, which starts with no space,
// and the rest of s. Spaces inside double quotes do not end it.
func nextArg(s string) (arg, rest string) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			inQuote = !inQuote
		case ' ', '\t', '\n', '\r', '\v', '\f':
			if !inQuote {
				return s[:i], s[i+1:]
			}
		}
	}
	return s, ""
}

// splitParam splits an argument at its first '=' and drops the quotes
// the kernel drops: around the whole argument, or around the value.
func splitParam(arg string) Param {
	quoted := strings.HasPrefix(arg, `"`)
	if quoted {
		arg = strings.TrimSuffix(arg[1:], `"`)
	}
	key, value, ok := strings.Cut(arg, "=")
	if ok && !quoted && strings.HasPrefix(value, `"`) {
		value = strings.TrimSuffix(value[1:], `"`)
	}
	return Param{Key: key, Value: value, HasValue: ok}
}

// Lookup returns the value of the last parameter named key and whether
// there is one at all.
func (c Cmdline) Lookup(key string) (p Param, ok bool) {
	for i := len(c) - 1; i >= 0; i-- {
		if sameKey(c[i].Key, key) {
			return c[i], true
		}
	}
	return Param{}, false
}

// Flag reports whether the boolean flag key is set: present without a
// value, or with a value strconv.ParseBool takes as true. Anything else
// ("key=0", "key=no", no key at all) is false.
func (c Cmdline) Flag(key string) bool {
	p, ok := c.Lookup(key)
	if !ok {
		return false
	}
	if !p.HasValue {
		return true
	}
	v, err := strconv.ParseBool(p.Value)
	return err == nil && v
}

// sameKey compares keys as the kernel does: '-' and '_' are equal.
func sameKey(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '-' {
			x = '_'
		}
		if y == '-' {
			y = '_'
		}
		if x != y {
			return false
		}
	}
	return true
}
