package identity

import "time"

// SetClock makes n judge peers' certificates at the times now gives, for
// the tests of package identity_test.
func SetClock(n *Node, now func() time.Time) { n.verifier.now = now }
