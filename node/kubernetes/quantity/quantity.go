// Package quantity reads Kubernetes resource quantities of bytes ("64Mi",
// "1.5G", "129e6"), as claims ask for storage and as the apiserver writes
// capacities back, and writes them, without linking the apimachinery
// module.
package quantity

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
)

// quantityRE is a Kubernetes resource quantity: a decimal number with a
// binary suffix (Ki … Ei), a decimal one (k … E), or an exponent (e6).
var quantityRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`)

// quantitySuffixes are the multipliers of the suffixes of quantityRE.
var quantitySuffixes = map[string]*big.Int{
	"":   big.NewInt(1),
	"Ki": new(big.Int).Lsh(big.NewInt(1), 10),
	"Mi": new(big.Int).Lsh(big.NewInt(1), 20),
	"Gi": new(big.Int).Lsh(big.NewInt(1), 30),
	"Ti": new(big.Int).Lsh(big.NewInt(1), 40),
	"Pi": new(big.Int).Lsh(big.NewInt(1), 50),
	"Ei": new(big.Int).Lsh(big.NewInt(1), 60),
	"k":  big.NewInt(1e3),
	"M":  big.NewInt(1e6),
	"G":  big.NewInt(1e9),
	"T":  big.NewInt(1e12),
	"P":  big.NewInt(1e15),
	"E":  big.NewInt(1e18),
}

// maxBytes is the largest quantity of bytes ParseBytes accepts.
var maxBytes = new(big.Int).Lsh(big.NewInt(1), 62)

// ParseBytes reads a quantity of bytes ("64Mi", "1.5G", "129e6"), rounded
// up to a whole byte.
func ParseBytes(q string) (uint64, error) {
	m := quantityRE.FindStringSubmatch(q)
	if m == nil {
		return 0, fmt.Errorf("%q is not a quantity of bytes", q)
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("%q is not a quantity of bytes", q)
	}
	suffix := m[2]
	if mult, ok := quantitySuffixes[suffix]; ok {
		r.Mul(r, new(big.Rat).SetInt(mult))
	} else {
		// An exponent: 10^n, within what fits.
		var exp int64
		if _, err := fmt.Sscan(suffix[1:], &exp); err != nil || exp < -18 || exp > 18 {
			return 0, fmt.Errorf("%q has an exponent out of range", q)
		}
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(abs(exp)), nil)
		if exp < 0 {
			r.Quo(r, new(big.Rat).SetInt(p))
		} else {
			r.Mul(r, new(big.Rat).SetInt(p))
		}
	}
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if new(big.Rat).SetInt(n).Cmp(r) < 0 {
		n.Add(n, big.NewInt(1))
	}
	if n.Cmp(maxBytes) > 0 {
		return 0, fmt.Errorf("%q is more bytes than a volume can have", q)
	}
	return n.Uint64(), nil
}

// FormatBytes writes n bytes as a quantity with the largest binary suffix
// that divides n exactly: 128Mi, not 134217728, as kubectl shows it.
func FormatBytes(n uint64) string {
	for _, s := range []struct {
		suffix string
		shift  uint
	}{{"Ei", 60}, {"Pi", 50}, {"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if n != 0 && n%(1<<s.shift) == 0 {
			return strconv.FormatUint(n>>s.shift, 10) + s.suffix
		}
	}
	return strconv.FormatUint(n, 10)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
