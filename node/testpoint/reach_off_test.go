//go:build !cairntest

package testpoint

import (
	"context"
	"testing"
)

// TestReachDoesNothing checks that a production build never stops, even
// under a cancelled context, and needs no runnable's context.
func TestReachDoesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range Steps() {
		if err := Reach(ctx, s); err != nil {
			t.Errorf("Reach(%q) = %v, want nil in a production build", s, err)
		}
	}
}
