package kmod

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// An Alias says that devices whose modalias matches Pattern are driven by
// Module. It is one line "alias <pattern> <module>" of modules.alias.
type Alias struct {
	Pattern string
	Module  string
}

// ParseAliases reads modules.alias. Blank lines and '#' comments are
// skipped; any other line must be "alias <pattern> <module>".
func ParseAliases(r io.Reader) ([]Alias, error) {
	var aliases []Alias
	err := eachLine(r, func(n int, line string) error {
		rest, ok := strings.CutPrefix(line, "alias")
		pattern, module, ok2 := strings.Cut(strings.TrimLeft(rest, " \t"), " ")
		module = strings.TrimSpace(module)
		if !ok || !ok2 || rest == "" || (rest[0] != ' ' && rest[0] != '\t') ||
			pattern == "" || module == "" || strings.ContainsAny(module, " \t") {
			return fmt.Errorf("line %d: want \"alias <pattern> <module>\", got %q", n, line)
		}
		aliases = append(aliases, Alias{Pattern: pattern, Module: moduleName(module)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("when parsing modules.alias: %w", err)
	}
	return aliases, nil
}

// eachLine calls fn with every line of r that is neither blank nor a '#'
// comment, numbered from 1, with surrounding space trimmed.
func eachLine(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// AliasIndex finds the modules whose alias patterns match a modalias. It
// files every pattern under its literal prefix, so a lookup only
// tries the few patterns that share a prefix with the modalias instead of
// all of them. It is safe for concurrent use once built.
type AliasIndex struct {
	byPrefix map[string][]indexedAlias
	// longest is the length of the longest prefix filed.
	longest int
}

type indexedAlias struct {
	pattern string
	// needle is a literal run that every match contains: a cheap test
	// that spares most patterns of a crowded prefix the full match.
	needle string
	module string
	// order is the alias's position in its file: Match returns modules in
	// file order, like modprobe does.
	order int
}

// NewAliasIndex indexes aliases.
func NewAliasIndex(aliases []Alias) *AliasIndex {
	x := &AliasIndex{byPrefix: make(map[string][]indexedAlias)}
	for i, a := range aliases {
		pattern := underscores(a.Pattern)
		prefix := globPrefix(pattern)
		x.byPrefix[prefix] = append(x.byPrefix[prefix], indexedAlias{
			pattern: pattern,
			needle:  globNeedle(pattern[len(prefix):]),
			module:  a.Module,
			order:   i,
		})
		x.longest = max(x.longest, len(prefix))
	}
	return x
}

// Match returns the modules, without duplicates and in the order of their
// aliases, of every alias whose pattern matches modalias. Like modprobe,
// it takes '-' and '_' for the same byte outside bracket expressions:
// "crypto_ecb" finds the alias "crypto-ecb".
func (x *AliasIndex) Match(modalias string) []string {
	modalias = underscores(modalias)
	var hits []indexedAlias
	for n := 0; n <= len(modalias) && n <= x.longest; n++ {
		for _, a := range x.byPrefix[modalias[:n]] {
			if strings.Contains(modalias, a.needle) && globMatch(a.pattern, modalias) {
				hits = append(hits, a)
			}
		}
	}
	slices.SortFunc(hits, func(a, b indexedAlias) int { return a.order - b.order })
	var modules []string
	for _, h := range hits {
		if !slices.Contains(modules, h.module) {
			modules = append(modules, h.module)
		}
	}
	return modules
}

// underscores turns every '-' of s outside a bracket expression into '_',
// the way depmod files alias patterns and modprobe reads the names it is
// asked for; a '[' without its ']' leaves the rest of s as it is.
func underscores(s string) string {
	if !strings.Contains(s, "-") {
		return s
	}
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '-':
			b[i] = '_'
		case '[':
			end := strings.IndexByte(s[i+1:], ']')
			if end < 0 {
				return string(b)
			}
			i += 1 + end
		}
	}
	return string(b)
}
