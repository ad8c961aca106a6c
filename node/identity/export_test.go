package identity

import "time"

// SetClock makes n judge peers' certificates at the times now gives, for
// the tests of package identity_test.
func SetClock(n *Node, now func() time.Time) { n.verifier.now = now }

// Judged tells how many judgements of peers' certificates n remembers.
func Judged(n *Node) int {
	count := 0
	n.verifier.judged.Range(func(any, any) bool { count++; return true })
	return count
}
