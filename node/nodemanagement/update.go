package nodemanagement

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// refusals are the installer's errors that say the release, or what the
// cluster trusts, fails a check: FailedPrecondition, with the check named.
var refusals = []error{
	update.ErrNoTrust, update.ErrTooLarge,
	release.ErrMalformed, release.ErrDigestMismatch, release.ErrUnsigned,
	release.ErrUnknownKey, release.ErrBadSignature, release.ErrArchitecture,
	release.ErrDowngrade,
}

// Update installs a release into the slot the node does not run, through
// Config.Installer, and streams its progress.
func (s *Service) Update(req *api.UpdateRequest, srv api.NodeManagement_UpdateServer) error {
	if s.cfg.Installer == nil {
		return status.Error(codes.Unimplemented, "this node cannot install updates")
	}
	switch {
	case req.GetImage() == "":
		return status.Error(codes.InvalidArgument, "image is empty: name the release to install")
	case !req.GetStage():
		return status.Error(codes.InvalidArgument, "booting an installed release is not built yet: stage it (cairnctl node update --stage)")
	}
	if going := s.goingDown(); going != "" {
		return status.Errorf(codes.FailedPrecondition, "the node is going down for %s", going)
	}
	log := s.logger()
	log.Infof("The owner asks to stage release %s (allow downgrade: %v)", req.GetImage(), req.GetAllowDowngrade())
	res, err := s.cfg.Installer.Install(srv.Context(), update.Request{
		Reference:      req.GetImage(),
		AllowDowngrade: req.GetAllowDowngrade(),
	}, func(p update.Progress) {
		if p.Total == 0 || p.Done == 0 || p.Done == p.Total {
			log.Infof("Update: %s", describeProgress(p))
		}
		// A failed send ends the call's context, which ends the install.
		_ = srv.Send(&api.UpdateProgress{Step: p.Step, DoneBytes: p.Done, TotalBytes: p.Total})
	})
	if err != nil {
		log.Warningf("Update to %s failed: %v", req.GetImage(), err)
		return status.Error(updateCode(err), err.Error())
	}
	log.Infof("Release %s staged in system slot %s", res.Version, res.Slot)
	return srv.Send(&api.UpdateProgress{Step: update.StepDone, Result: &api.UpdateResult{
		Slot: string(res.Slot), Version: res.Version, Digest: res.Digest,
	}})
}

// updateCode is the status code of an install's error.
func updateCode(err error) codes.Code {
	switch {
	case errors.Is(err, update.ErrBusy):
		return codes.Aborted
	case errors.Is(err, update.ErrReference):
		return codes.InvalidArgument
	}
	for _, r := range refusals {
		if errors.Is(err, r) {
			return codes.FailedPrecondition
		}
	}
	if c := status.Code(err); c != codes.Unknown {
		return c
	}
	return codes.Internal
}

// describeProgress is p in words, for the log.
func describeProgress(p update.Progress) string {
	if p.Total == 0 {
		return p.Step
	}
	return fmt.Sprintf("%s: %.1f of %.1f MiB", p.Step, float64(p.Done)/(1<<20), float64(p.Total)/(1<<20))
}

// GetSystemSlots says what each system slot holds.
func (s *Service) GetSystemSlots(_ context.Context, _ *api.GetSystemSlotsRequest) (*api.GetSystemSlotsResponse, error) {
	if s.cfg.Installer == nil {
		return nil, status.Error(codes.Unimplemented, "this node knows nothing of its system slots")
	}
	slots, err := s.cfg.Installer.Slots()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "when reading the record of the system slots: %v", err)
	}
	resp := &api.GetSystemSlotsResponse{}
	for _, sl := range slots {
		state := ""
		if sl.State != private.SystemSlots_Slot_STATE_UNSPECIFIED {
			state = strings.ToLower(sl.State.String())
		}
		resp.Slots = append(resp.Slots, &api.SystemSlot{Name: string(sl.Slot), Running: sl.Running, State: state, Version: sl.Version})
	}
	return resp, nil
}
