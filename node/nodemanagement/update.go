package nodemanagement

import (
	"context"
	"errors"
	"strings"
	"time"

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
	update.ErrNoTrust, update.ErrTooLarge, update.ErrNotStaged, update.ErrOnTrial,
	update.ErrNoFirmware, update.ErrNotGood,
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
	if req.GetImage() == "" {
		return status.Error(codes.InvalidArgument, "image is empty: name the release to install")
	}
	if going := s.goingDown(); going != "" {
		return status.Errorf(codes.FailedPrecondition, "the node is going down for %s", going)
	}
	if !req.GetStage() {
		if s.cfg.RebootFirmware == nil {
			return status.Error(codes.Unimplemented, "this node cannot reboot through the firmware for a trial: install the release with stage only")
		}
		if err := s.cfg.Installer.CanTry(); err != nil {
			return status.Errorf(codes.FailedPrecondition, "%v: install the release with stage only", err)
		}
	}
	log := s.logger()
	log.Infof("The owner asks to install release %s (allow downgrade: %v, stage only: %v)", req.GetImage(), req.GetAllowDowngrade(), req.GetStage())
	res, err := s.cfg.Installer.Install(srv.Context(), update.Request{
		Reference:      req.GetImage(),
		AllowDowngrade: req.GetAllowDowngrade(),
	}, func(p update.Progress) {
		if p.Milestone() {
			log.Infof("Update: %s", p)
		}
		// A failed send ends the call's context, which ends the install.
		_ = srv.Send(&api.UpdateProgress{Step: p.Step, DoneBytes: p.Done, TotalBytes: p.Total})
	})
	if err != nil {
		log.Warningf("Update to %s failed: %v", req.GetImage(), err)
		return status.Error(updateCode(err), err.Error())
	}
	log.Infof("Release %s staged in system slot %s", res.Version, res.Slot)
	result := &api.UpdateResult{Slot: string(res.Slot), Version: res.Version, Digest: res.Digest}
	if req.GetStage() {
		return srv.Send(&api.UpdateProgress{Step: update.StepDone, Result: result})
	}
	deadline := time.Duration(req.GetTrialDeadlineSeconds()) * time.Second
	if _, err := s.cfg.Installer.Activate(deadline); err != nil {
		log.Warningf("Release %s staged, but its trial could not be set up: %v", res.Version, err)
		return status.Error(updateCode(err), err.Error())
	}
	if err := s.schedule(srv.Context(), "reboot into slot "+string(res.Slot)+" for its trial", s.cfg.RebootFirmware); err != nil {
		return err
	}
	log.Infof("Rebooting through the firmware into slot %s for the trial of %s", res.Slot, res.Version)
	result.Rebooting = true
	return srv.Send(&api.UpdateProgress{Step: StepTrial, Result: result})
}

// StepTrial is the last step of an update that boots the new slot.
const StepTrial = "rebooting into the new slot for its trial"

// Rollback makes the other slot, which proved itself before, the
// firmware's default, and reboots into it through the firmware.
func (s *Service) Rollback(ctx context.Context, _ *api.RollbackRequest) (*api.RollbackResponse, error) {
	if s.cfg.Installer == nil {
		return nil, status.Error(codes.Unimplemented, "this node cannot switch system slots")
	}
	if going := s.goingDown(); going != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "the node is going down for %s", going)
	}
	res, err := s.cfg.Installer.Rollback()
	if err != nil {
		return nil, status.Error(updateCode(err), err.Error())
	}
	if err := s.schedule(ctx, "reboot into slot "+string(res.Slot), s.cfg.RebootFirmware); err != nil {
		return nil, err
	}
	s.logger().Infof("The owner rolls back to slot %s (%s): rebooting through the firmware", res.Slot, res.Version)
	return &api.RollbackResponse{Slot: string(res.Slot), Version: res.Version}, nil
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
		resp.Slots = append(resp.Slots, &api.SystemSlot{Name: string(sl.Slot), Running: sl.Running, State: state, Version: sl.Version, Reason: sl.Reason})
	}
	return resp, nil
}
