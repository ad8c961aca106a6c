package nodemanagement

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/update/updatetest"
	"cairn.dev/cairn/proto/api"
)

// TestUpdate stages a release through the API as the owner: the progress
// streams, the last message carries the result, and GetSystemSlots shows
// the staged slot. A release the cluster's keys do not trust is refused
// with FailedPrecondition. Then an update that is not only staged sets
// up the trial and reboots the node through the firmware, once its
// answer is sent. A rollback to a slot that is only staged is refused.
func TestUpdate(t *testing.T) {
	n := updatetest.New(t)
	const version = "0.0.0-20260601000000-0123456789ab"
	r := n.Push(t, version)
	rebooted := make(chan struct{})
	c := serve(t, New(Config{Installer: n.Installer, RebootFirmware: func() { close(rebooted) }})).owner(t)
	ctx := context.Background()

	// call runs an update and returns its messages and its status.
	call := func(req *api.UpdateRequest) ([]*api.UpdateProgress, error) {
		stream, err := c.Update(ctx, req)
		if err != nil {
			return nil, err
		}
		var msgs []*api.UpdateProgress
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return msgs, nil
			}
			if err != nil {
				return msgs, err
			}
			msgs = append(msgs, m)
		}
	}

	if _, err := call(&api.UpdateRequest{Image: "no-repository", Stage: true}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not a release reference") {
		t.Errorf("Update of a malformed reference: %v, want InvalidArgument saying so", err)
	}
	n.Trust(false)
	if _, err := call(&api.UpdateRequest{Image: r.Reference, Stage: true}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "trusts no release key") {
		t.Errorf("Update with no trusted key: %v, want FailedPrecondition saying so", err)
	}
	n.Trust(true)

	msgs, err := call(&api.UpdateRequest{Image: r.Reference, Stage: true})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if len(msgs) < 3 {
		t.Fatalf("Update sent %d messages, want the steps and the result", len(msgs))
	}
	res := msgs[len(msgs)-1].GetResult()
	if res.GetSlot() != "b" || res.GetVersion() != version || res.GetDigest() != r.Artifact.Manifest.Descriptor.Digest {
		t.Errorf("result = %v, want slot b, version %s", res, version)
	}

	want := []*api.SystemSlot{
		{Name: "a", Running: true, State: "good", Version: updatetest.Running},
		{Name: "b", State: "staged", Version: version},
	}
	checkSlots(t, c, want)
	if _, err := c.Rollback(ctx, &api.RollbackRequest{}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not a good one") {
		t.Errorf("Rollback to a staged slot: %v, want FailedPrecondition saying it is not good", err)
	}

	msgs, err = call(&api.UpdateRequest{Image: r.Reference, TrialDeadlineSeconds: 60})
	if err != nil {
		t.Fatalf("Update with a trial: %v", err)
	}
	if res := msgs[len(msgs)-1].GetResult(); !res.GetRebooting() || res.GetSlot() != "b" {
		t.Errorf("result = %v, want slot b, rebooting", res)
	}
	select {
	case <-rebooted:
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not reboot for the trial")
	}
	want[1].State = "trial"
	checkSlots(t, c, want)
}

// checkSlots checks that GetSystemSlots says want.
func checkSlots(t *testing.T, c api.NodeManagementClient, want []*api.SystemSlot) {
	t.Helper()
	got, err := c.GetSystemSlots(context.Background(), &api.GetSystemSlotsRequest{})
	if err != nil {
		t.Fatalf("GetSystemSlots: %v", err)
	}
	if len(got.GetSlots()) != 2 || got.GetSlots()[0].String() != want[0].String() || got.GetSlots()[1].String() != want[1].String() {
		t.Errorf("GetSystemSlots = %v, want %v", got.GetSlots(), want)
	}
}
