package devicemapper

import (
	"fmt"
)

// CreateVerity creates, loads read-only and resumes the dm-verity device
// name for v, and returns its device number. When a step fails the
// half-made device is removed again, so that a retry starts from nothing.
func (c *Control) CreateVerity(name string, v Verity) (uint64, error) {
	target, err := v.verityTarget()
	if err != nil {
		return 0, fmt.Errorf("when creating verity device %q: %w", name, err)
	}
	payload, err := encodeTargets([]Target{target})
	if err != nil {
		return 0, fmt.Errorf("when creating verity device %q: %w", name, err)
	}
	// dm-verity refuses a table that may be written to.
	return c.createLoaded(name, payload, flagReadOnly)
}

// VerityState returns the state of the verity device name: whether a
// block read from it so far failed its check.
func (c *Control) VerityState(name string) (VerityState, error) {
	targets, err := c.Status(name)
	if err != nil {
		return 0, err
	}
	if len(targets) != 1 || targets[0].Type != "verity" {
		return 0, fmt.Errorf("device %q is not one verity target", name)
	}
	return ParseVerityStatus(targets[0].Params)
}
