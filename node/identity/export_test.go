package identity

import (
	"crypto/x509"
	"time"
)

// SetClock makes n judge peers' certificates at the times now gives, for
// the tests of package identity_test.
func SetClock(n *Node, now func() time.Time) { n.verifier.now = now }

// Judged tells how many judgements of peers' certificates n remembers.
func Judged(n *Node) int {
	count := 0
	n.verifier.judged.Range(func(any, any) bool { count++; return true })
	return count
}

// VerifyServer judges certs as n's clients judge a server's: a self-signed
// certificate is refused.
func VerifyServer(n *Node, certs []*x509.Certificate) (Peer, error) {
	return n.verifier.verify(certs, x509.ExtKeyUsageServerAuth, false)
}
