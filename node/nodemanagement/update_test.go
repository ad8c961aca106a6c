package nodemanagement

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/update/updatetest"
	"cairn.dev/cairn/proto/api"
)

// TestUpdate stages a release through the API as the owner: the progress
// streams, the last message carries the result, and GetSystemSlots shows
// the staged slot. A release the cluster's keys do not trust is refused
// with FailedPrecondition, and an update that is not staged is refused.
func TestUpdate(t *testing.T) {
	n := updatetest.New(t)
	const version = "0.0.0-20260601000000-0123456789ab"
	r := n.Push(t, version)
	c := serve(t, New(Config{Installer: n.Installer})).owner(t)
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

	if _, err := call(&api.UpdateRequest{Image: r.Reference}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--stage") {
		t.Errorf("Update without stage: %v, want InvalidArgument naming --stage", err)
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

	got, err := c.GetSystemSlots(ctx, &api.GetSystemSlotsRequest{})
	if err != nil {
		t.Fatalf("GetSystemSlots: %v", err)
	}
	want := []*api.SystemSlot{
		{Name: "a", Running: true, Version: updatetest.Running},
		{Name: "b", State: "staged", Version: version},
	}
	if len(got.GetSlots()) != 2 || got.GetSlots()[0].String() != want[0].String() || got.GetSlots()[1].String() != want[1].String() {
		t.Errorf("GetSystemSlots = %v, want %v", got.GetSlots(), want)
	}
}
