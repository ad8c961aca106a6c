package logtree

import (
	"errors"
	"fmt"
	"strings"
)

// DN is the dotted name of a node in the log tree, for example
// "root.network.dhcp". Each dot-separated part names one level; the empty DN
// is the root of the tree, above everything else.
type DN string

// errEmptyPart is returned by split for DNs like "a..b", ".a" or "a.".
var errEmptyPart = errors.New("empty part")

// split returns the parts of dn from the top of the tree down, or an error if
// a part is empty. The root DN has no parts.
func (d DN) split() ([]string, error) {
	if d == "" {
		return nil, nil
	}
	parts := strings.Split(string(d), ".")
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("invalid DN %q: part %d: %w", string(d), i, errEmptyPart)
		}
	}
	return parts, nil
}

// Validate says what is wrong with d as a DN to read (Read refuses it
// for the same reason), or nil: no part may be empty.
func (d DN) Validate() error {
	_, err := d.split()
	return err
}

// normalized returns the parts of dn with empty parts dropped, so that
// "a..b." becomes [a b]. Loggers use it because logging cannot fail: a
// slightly malformed name still lands in a predictable node.
func (d DN) normalized() []string {
	parts := strings.Split(string(d), ".")
	kept := parts[:0]
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return kept
}
