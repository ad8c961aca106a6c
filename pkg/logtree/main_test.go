package logtree

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine, such as a console's,
// outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
