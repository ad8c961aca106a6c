package update

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/uki"
	"cairn.dev/cairn/proto/private"
)

// DefaultTrialDeadline is how long a trial boot has to prove itself
// healthy when the request names no deadline.
const DefaultTrialDeadline = 10 * time.Minute

var (
	// ErrNotStaged: the other slot holds nothing ready to be tried.
	ErrNotStaged = errors.New("the other system slot holds no staged release")
	// ErrOnTrial: the running slot has not proved itself yet, so the
	// other one is the last good slot, which nothing may write or leave.
	ErrOnTrial = errors.New("the running system slot is on trial")
	// ErrNoFirmware: this boot cannot ask the firmware for anything (no
	// EFI variables), so it cannot try a slot nor switch to one.
	ErrNoFirmware = errors.New("the node cannot set the firmware's boot entries")
	// ErrNotGood: the other slot never proved itself, so the node cannot
	// go back to it.
	ErrNotGood = errors.New("the other system slot is not a good one")
)

// slotEntry is slot's entry of rec; never nil.
func slotEntry(rec *private.SystemSlots, slot localstorage.Slot) *private.SystemSlots_Slot {
	e := rec.GetA()
	if slot == localstorage.SlotB {
		e = rec.GetB()
	}
	if e == nil {
		return &private.SystemSlots_Slot{}
	}
	return e
}

// onTrial says whether the running slot is on trial: the firmware booted
// it once, and it has not proved itself.
func (i *Installer) onTrial(rec *private.SystemSlots) bool {
	s := slotEntry(rec, i.cfg.Running).GetState()
	return s == private.SystemSlots_Slot_TRIAL || s == private.SystemSlots_Slot_STAGED
}

// CanTry says why the node could not try a release once it is staged,
// or nil: node management asks before it installs one to boot.
func (i *Installer) CanTry() error {
	if i.cfg.Firmware == nil {
		return ErrNoFirmware
	}
	return nil
}

// Activate asks the firmware to boot the staged slot once, at the next
// boot, and records it on TRIAL with deadline (DefaultTrialDeadline when
// zero). The caller then reboots the node through the firmware. The
// firmware's default stays the running slot, so a trial boot that never
// proves itself is followed by this slot again.
func (i *Installer) Activate(deadline time.Duration) (Result, error) {
	if !i.busy.TryLock() {
		return Result{}, ErrBusy
	}
	defer i.busy.Unlock()
	if i.cfg.Firmware == nil {
		return Result{}, ErrNoFirmware
	}
	if deadline <= 0 {
		deadline = DefaultTrialDeadline
	}
	rec, err := ReadSlots(i.cfg.Slots)
	if err != nil {
		return Result{}, err
	}
	target := i.cfg.Running.Other()
	e := slotEntry(rec, target)
	if e.GetState() != private.SystemSlots_Slot_STAGED {
		return Result{}, fmt.Errorf("%w: slot %s is %s", ErrNotStaged, target, stateName(e.GetState()))
	}
	if i.onTrial(rec) {
		return Result{}, fmt.Errorf("%w: wait until it is healthy", ErrOnTrial)
	}
	if err := i.keepRunningUKI(); err != nil {
		return Result{}, err
	}
	run := slotEntry(rec, i.cfg.Running)
	if run.GetState() != private.SystemSlots_Slot_GOOD {
		if err := i.record(i.cfg.Running, &private.SystemSlots_Slot{
			State:   private.SystemSlots_Slot_GOOD,
			Version: i.cfg.Version.String(),
			Verity:  i.cfg.RunningVerity.String(),
			UkiPath: ukiPath(i.cfg.Running),
		}); err != nil {
			return Result{}, err
		}
	}
	if err := i.cfg.Firmware.TryOnce(target); err != nil {
		return Result{}, err
	}
	e.State = private.SystemSlots_Slot_TRIAL
	e.TrialDeadlineMillis = deadline.Milliseconds()
	e.Reason = ""
	if err := i.record(target, e); err != nil {
		return Result{}, err
	}
	return Result{Slot: target, Version: e.GetVersion(), Digest: e.GetReleaseDigest()}, nil
}

// keepRunningUKI makes sure the running slot's unified kernel image is at
// its place in EFI/cairn, so that the firmware can go back to it: a node
// that never installed anything booted the image build's, at the
// removable media path, which promoting another slot replaces. It copies
// that one only when its command line pins the running system image.
func (i *Installer) keepRunningUKI() error {
	own := i.cfg.UKIs.For(i.cfg.Running)
	if _, err := os.Stat(own.FullPath()); err == nil {
		return nil
	}
	f, err := os.Open(i.cfg.Fallback.FullPath())
	if err != nil {
		return fmt.Errorf("when reading the image the node booted: %w", err)
	}
	defer f.Close()
	b, err := uki.Locate(f)
	if err != nil {
		return fmt.Errorf("when reading the image the node booted, %s: %w", i.cfg.Fallback.FullPath(), err)
	}
	if !strings.Contains(b.Cmdline, i.cfg.RunningVerity.String()) {
		return fmt.Errorf("%s is not the running slot's image: its command line pins another system image", i.cfg.Fallback.FullPath())
	}
	if err := i.cfg.UKIs.MkdirAll(0o700); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := own.WriteFrom(f); err != nil {
		return fmt.Errorf("when keeping the UKI of the running slot %s: %w", i.cfg.Running, err)
	}
	return nil
}

// Rollback makes the other slot, which must have proved itself before,
// the firmware's default. The caller then reboots the node.
func (i *Installer) Rollback() (Result, error) {
	if !i.busy.TryLock() {
		return Result{}, ErrBusy
	}
	defer i.busy.Unlock()
	if i.cfg.Firmware == nil {
		return Result{}, ErrNoFirmware
	}
	rec, err := ReadSlots(i.cfg.Slots)
	if err != nil {
		return Result{}, err
	}
	target := i.cfg.Running.Other()
	e := slotEntry(rec, target)
	if e.GetState() != private.SystemSlots_Slot_GOOD {
		return Result{}, fmt.Errorf("%w: slot %s is %s", ErrNotGood, target, stateName(e.GetState()))
	}
	if err := i.makeDefault(target, rec); err != nil {
		return Result{}, err
	}
	return Result{Slot: target, Version: e.GetVersion(), Digest: e.GetReleaseDigest()}, nil
}

// makeDefault makes slot the firmware's default, with the other slot
// behind it when that one is good, and copies slot's unified kernel image
// to the removable media path, which the firmware boots when it has lost
// its entries and which a kexec reboot loads (node/kexec).
func (i *Installer) makeDefault(slot localstorage.Slot, rec *private.SystemSlots) error {
	order := []localstorage.Slot{slot}
	other := slot.Other()
	if slotEntry(rec, other).GetState() == private.SystemSlots_Slot_GOOD {
		if _, err := os.Stat(i.cfg.UKIs.For(other).FullPath()); err == nil {
			order = append(order, other)
		}
	}
	if err := i.cfg.Firmware.MakeDefault(order...); err != nil {
		return err
	}
	f, err := os.Open(i.cfg.UKIs.For(slot).FullPath())
	if err != nil {
		return fmt.Errorf("when reading slot %s's UKI: %w", slot, err)
	}
	defer f.Close()
	if err := i.cfg.Fallback.WriteFrom(f); err != nil {
		return fmt.Errorf("when copying slot %s's UKI to the removable media path: %w", slot, err)
	}
	return nil
}

// Verdict is what JudgeBoot found.
type Verdict struct {
	// RolledBack is set when this boot follows a trial of the other slot
	// that did not prove itself: "rolled back from <version>: <reason>".
	RolledBack string
	// Proved is set when this boot was a trial and the slot proved
	// itself, now the default.
	Proved bool
}

// JudgeBoot judges this boot by the record of the slots, once the ESP is
// mounted. A trial of the other slot that did not end healthy (its boot
// gave up, or never got that far: a panic, a hang the watchdog reset, a
// power cut) is recorded BAD, with the reason. When this boot is itself a
// trial, it waits for health (the node serving what its roles ask for)
// until the slot's deadline: healthy, the slot becomes the firmware's
// default and GOOD; not, it records why and calls reboot, which must go
// through the firmware, whose default is still the last good slot. say
// writes a line on the consoles.
func (i *Installer) JudgeBoot(ctx context.Context, healthy HealthWait, reboot func(), say func(string, ...any)) (Verdict, error) {
	var v Verdict
	rec, err := ReadSlots(i.cfg.Slots)
	if err != nil {
		// Reading it again cannot help: this boot stays as the firmware
		// booted it, and the next install writes the record anew.
		say("the record of the system slots is unreadable, so this boot is not judged: %v", err)
		return v, nil
	}
	other := slotEntry(rec, i.cfg.Running.Other())
	if other.GetState() == private.SystemSlots_Slot_TRIAL {
		reason := other.GetReason()
		if reason == "" {
			reason = "its trial boot ended before it was healthy (a panic, a hang, a reset or a power cut)"
		}
		other.State, other.Reason = private.SystemSlots_Slot_BAD, reason
		if err := i.record(i.cfg.Running.Other(), other); err != nil {
			return v, err
		}
		v.RolledBack = fmt.Sprintf("rolled back from %s: %s", other.GetVersion(), reason)
		say("%s", v.RolledBack)
	}
	if !i.onTrial(rec) {
		return v, nil
	}
	run := slotEntry(rec, i.cfg.Running)
	deadline := time.Duration(run.GetTrialDeadlineMillis()) * time.Millisecond
	if deadline <= 0 {
		deadline = DefaultTrialDeadline
	}
	say("trial boot of %s in slot %s: it becomes the default once healthy, within %v", i.cfg.Version, i.cfg.Running, deadline)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, deadline)
	waiting, ok := healthy(wctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return v, err
	}
	if !ok {
		run.Reason = fmt.Sprintf("not healthy within %v: waiting for %s", deadline, waiting)
		if err := i.record(i.cfg.Running, run); err != nil {
			return v, err
		}
		say("slot %s (%s) %s; rebooting into the last good slot", i.cfg.Running, i.cfg.Version, run.Reason)
		reboot()
		return v, nil
	}
	i.busy.Lock()
	defer i.busy.Unlock()
	if err := i.makeDefault(i.cfg.Running, rec); err != nil {
		return v, err
	}
	run.State, run.Reason, run.TrialDeadlineMillis = private.SystemSlots_Slot_GOOD, "", 0
	if err := i.record(i.cfg.Running, run); err != nil {
		return v, err
	}
	v.Proved = true
	say("slot %s (%s) proved itself healthy in %v: it is now the default", i.cfg.Running, i.cfg.Version, time.Since(start).Round(time.Second))
	return v, nil
}

// HealthWait waits until the node is healthy (the role server's health:
// enrolled, and serving what its roles ask for) and returns true, or
// until ctx ends and returns what it still waited for.
type HealthWait func(ctx context.Context) (waiting string, healthy bool)

// stateName is a state's name for people: "staged", "bad", "empty".
func stateName(s private.SystemSlots_Slot_State) string {
	if s == private.SystemSlots_Slot_STATE_UNSPECIFIED {
		return "empty"
	}
	return strings.ToLower(s.String())
}
