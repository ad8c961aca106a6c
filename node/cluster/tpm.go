package cluster

import (
	"errors"
	"fmt"

	"cairn.dev/cairn/pkg/tpmseal"
)

// openMachineTPM opens the machine's TPM through the kernel's resource
// manager. A machine without one gives errNoTPM.
func openMachineTPM() (sealer, error) {
	t, err := tpmseal.Open()
	if errors.Is(err, tpmseal.ErrNoTPM) {
		return nil, fmt.Errorf("%w: %w", errNoTPM, err)
	}
	if err != nil {
		return nil, fmt.Errorf("when opening the TPM: %w", err)
	}
	return t, nil
}
