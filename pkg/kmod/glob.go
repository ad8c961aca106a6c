package kmod

import "strings"

// Alias patterns are shell globs, matched the way fnmatch(3) does without
// flags: '*' matches any run of bytes ('/' included), '?' any one byte,
// '[...]' one byte of a set ("[a-z]", "[!0-9]" or "[^0-9]" for the
// complement) and a backslash takes the next byte literally. A '[' without
// a closing ']' is a literal. There are no syntax errors.
//
// Patterns are interpreted as they are, not compiled: a kernel has tens of
// thousands of them, and only a handful per device are ever tried, so a
// compile step at boot would cost more than it saves.

// globPrefix returns the literal text that every match of pattern starts
// with (up to the first special byte).
func globPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// globNeedle returns the longest run of literal bytes in pattern: every
// string that matches pattern contains it. Escaped bytes end a run rather
// than being unescaped.
func globNeedle(pattern string) string {
	needle := ""
	start := 0
	cut := func(end, next int) {
		if end-start > len(needle) {
			needle = pattern[start:end]
		}
		start = next
	}
	for i := 0; i < len(pattern); {
		switch pattern[i] {
		case '*', '?':
			cut(i, i+1)
			i++
		case '\\':
			cut(i, min(i+2, len(pattern)))
			i = start
		case '[':
			if n, _, ok := matchSet(pattern[i+1:], 0); ok {
				cut(i, i+1+n)
				i = start
			} else {
				i++
			}
		default:
			i++
		}
	}
	cut(len(pattern), len(pattern))
	return needle
}

// globMatch reports whether the whole of s matches pattern.
//
// It walks pattern and subject together and, on a mismatch, resumes after
// the most recent '*' with that star swallowing one more byte. Remembering
// only the last star is enough for globs: a later star can absorb anything
// an earlier one would have, so the work is O(len(s) × len(pattern)) at
// worst, never exponential.
func globMatch(pattern, s string) bool {
	pi, si := 0, 0
	starPi, starSi := -1, 0
	for pi < len(pattern) || si < len(s) {
		if pi < len(pattern) {
			if pattern[pi] == '*' {
				starPi, starSi = pi, si
				pi++
				continue
			}
			if si < len(s) {
				if n, ok := matchOne(pattern[pi:], s[si]); ok {
					pi += n
					si++
					continue
				}
			}
		}
		if starPi < 0 || starSi >= len(s) {
			return false
		}
		starSi++
		pi, si = starPi+1, starSi
	}
	return true
}

// matchOne matches the single-byte construct at the start of p (anything
// but '*') against c. It returns how many bytes of p the construct takes
// and whether c matched it.
func matchOne(p string, c byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '[':
		if n, in, ok := matchSet(p[1:], c); ok {
			return 1 + n, in
		}
	case '\\':
		if len(p) > 1 {
			return 2, p[1] == c
		}
	}
	return 1, p[0] == c
}

// matchSet reads a bracket expression whose '[' has been consumed and says
// whether c is in the set. It returns the bytes of p the expression used,
// ']' included, and ok = false when there is no closing bracket (the '['
// is then a literal).
func matchSet(p string, c byte) (n int, in bool, ok bool) {
	i := 0
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(p) {
		lo := p[i]
		if lo == ']' && !first {
			return i + 1, in != negate, true
		}
		first = false
		if lo == '\\' && i+1 < len(p) {
			i++
			lo = p[i]
		}
		i++
		hi := lo
		// A range "a-z"; a '-' just before the closing ']' is a literal.
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi = p[i+1]
			i += 2
			if hi == '\\' && i < len(p) {
				hi = p[i]
				i++
			}
		}
		if lo <= c && c <= hi {
			in = true
		}
	}
	return 0, false, false
}
