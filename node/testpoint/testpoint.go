package testpoint

import (
	"fmt"
	"slices"
	"strings"
)

// Step names a point of a node's first boot at which a test may stop it.
type Step string

// The steps, in the words of the operator issue that asked for power cuts
// at each of them. A bootstrapping node passes the four storage steps
// (then sealed); a registering node passes registered and committed
// first, as it sets its data partition up only once committed.
const (
	// GPTWritten: the data partition's entry is in the boot disk's
	// partition table (and known to the kernel); nothing is on the
	// partition yet.
	GPTWritten Step = "gpt-written"
	// CryptOpened: the partition's header is zeroed and the dm-crypt
	// target over it is set up, before mkfs.
	CryptOpened Step = "crypt-opened"
	// MkfsRunning: mkfs.xfs was started and may still be writing; a
	// stop here leaves it running, so that a power cut lands in the
	// middle of it or just after it ended.
	MkfsRunning Step = "mkfs-running"
	// MkfsDone: mkfs.xfs has finished, and the header that says the
	// partition is set up is not written yet.
	MkfsDone Step = "mkfs-done"
	// Registered: RegisterNode succeeded (the cluster lists the node
	// NEW); CommitNode was not called yet.
	Registered Step = "registered"
	// Committed: CommitNode succeeded (the cluster lists the node UP);
	// the data partition and the sealed configuration are not made yet.
	Committed Step = "committed"
	// Sealed: the sealed configuration is on the ESP, which makes every
	// later boot a join; the marker that says the enrolment is complete
	// is not stated yet, and the node parameters are still on the ESP.
	Sealed Step = "sealed"
)

// Steps returns every step, in the order of the issue.
func Steps() []Step {
	return []Step{GPTWritten, CryptOpened, MkfsRunning, MkfsDone, Registered, Committed, Sealed}
}

// Parse returns the step called name, or an error that lists the steps.
func Parse(name string) (Step, error) {
	if slices.Contains(Steps(), Step(name)) {
		return Step(name), nil
	}
	var names []string
	for _, s := range Steps() {
		names = append(names, string(s))
	}
	return "", fmt.Errorf("%q is not a test point; there are %s", name, strings.Join(names, ", "))
}
