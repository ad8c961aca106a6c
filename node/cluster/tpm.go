package cluster

import "fmt"

// openMachineTPM opens the machine's TPM. Until pkg/tpmseal is part of
// the build, no machine has one as far as enrolment knows: TPM mode
// REQUIRED refuses to enrol and BEST_EFFORT stores the configuration
// unsealed, both saying why.
func openMachineTPM() (sealer, error) {
	return nil, fmt.Errorf("%w: TPM support is not built into this node yet", errNoTPM)
}
