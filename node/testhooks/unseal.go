//go:build cairntest

package testhooks

import (
	"context"
	"fmt"
	"os"
	"time"

	"cairn.dev/cairn/node/cluster"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tpmseal"
)

// unsealAgainRunnable is cairn.test.unseal-again: it reads PCR 11 as the
// boot starts, waits until enrolment has extended it (its end of
// unsealing), then unseals the sealed configuration at sealedPath as a
// join does, bound to this boot's release, and says with printf whether
// the TPM refused. A test on a real node, where what enrolment does to
// the TPM is what is tested.
func unsealAgainRunnable(sealedPath string, printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		binding, err := tpmseal.ReadBinding(tpmseal.StubKeyFile, tpmseal.StubSignatureFile)
		if err != nil {
			return fmt.Errorf("test: this boot has no PCR binding: %w", err)
		}
		first, err := readPCR11()
		if err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			now, err := readPCR11()
			if err != nil {
				return err
			}
			if now != first {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		b, err := os.ReadFile(sealedPath)
		if err != nil {
			return fmt.Errorf("test: reading the sealed configuration: %w", err)
		}
		if err := cluster.TryUnseal(b, binding); err != nil {
			printf("test: a second unseal in this boot was refused: %v", err)
		} else {
			printf("test: a second unseal in this boot SUCCEEDED")
		}
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
}

// readPCR11 reads PCR 11 through the TPM's resource manager.
func readPCR11() ([32]byte, error) {
	t, err := tpmseal.Open()
	if err != nil {
		return [32]byte{}, fmt.Errorf("test: %w", err)
	}
	defer t.Close()
	return t.ReadPCR(11)
}
