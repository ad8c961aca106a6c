package update

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/localstorage/declarative"
	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/verity"
	"cairn.dev/cairn/proto/private"
)

// Config is what an Installer works with. Every field but Client and Now
// is required.
type Config struct {
	// Running is the system slot the node booted; the installer writes
	// the other one.
	Running localstorage.Slot
	// Version is the version the node runs.
	Version release.Version
	// Architecture is the node's, in GOARCH spelling; runtime.GOARCH
	// when empty.
	Architecture string
	// Partition returns the block device of a system slot and its size in
	// bytes.
	Partition func(localstorage.Slot) (device string, size uint64, err error)
	// Trust returns what the cluster configuration says about releases
	// now: read at every install, so that a key the owner removed is no
	// longer accepted.
	Trust func(context.Context) (Trust, error)
	// Spool is a directory on the data partition where a release is
	// downloaded and checked before anything is written to a slot.
	Spool *declarative.Directory
	// Slots is the record of the system slots on the ESP.
	Slots *declarative.File
	// UKIs is where the slots' unified kernel images go on the ESP.
	UKIs *localstorage.ESPUKIDirectory
	// RunningVerity are the verity parameters of the running slot's
	// system image, by which the installer knows the image that booted.
	RunningVerity verity.Params
	// Fallback is the unified kernel image at the ESP's removable media
	// path: the image build's, then the default slot's.
	Fallback *declarative.File
	// Firmware sets the firmware's boot entries; nil when this boot
	// cannot (no EFI variables): such a node stages releases, and tries
	// none.
	Firmware *Firmware
	// Client is the HTTP client for registries; nil means one whose
	// connections time out (a whole download does not).
	Client *http.Client
	// Now is the clock of the record's times; nil means time.Now.
	Now func() time.Time
}

// Trust is what the cluster configuration says about releases.
type Trust struct {
	// Keys are the release keys the cluster trusts.
	Keys []release.PublicKey
	// PlainHTTP are the registry hosts (host[:port]) reached over plain
	// HTTP. The release's signature, not the transport, is what makes
	// its content trusted.
	PlainHTTP []string
}

// Request is what to install.
type Request struct {
	// Reference names the release in a registry:
	// host[:port]/repository(:tag|@sha256:…).
	Reference string
	// AllowDowngrade accepts a release older than the running one.
	AllowDowngrade bool
}

// Progress says how far an install is: Step names it, and Done of Total
// bytes are through it, when it moves bytes (Total is 0 otherwise).
type Progress struct {
	Step        string
	Done, Total int64
}

// String is p in words, for logs: the step, and the MiB through it of a
// step that moves bytes.
func (p Progress) String() string {
	if p.Total == 0 {
		return p.Step
	}
	return fmt.Sprintf("%s: %.1f of %.1f MiB", p.Step, float64(p.Done)/(1<<20), float64(p.Total)/(1<<20))
}

// Milestone says p is worth a log line: a step that moves no bytes, or
// the start or the end of one that does.
func (p Progress) Milestone() bool {
	return p.Total == 0 || p.Done == 0 || p.Done == p.Total
}

// The steps of Progress.
const (
	StepVerify   = "verifying"
	StepDownload = "downloading"
	StepWrite    = "writing"
	StepCopy     = "copying"
	StepReadBack = "reading back"
	StepUKI      = "installing the UKI"
	StepDone     = "staged"
)

// Result is what an install left.
type Result struct {
	// Slot is the slot written.
	Slot localstorage.Slot
	// Version is the release's version.
	Version string
	// Digest is the release manifest's digest.
	Digest string
}

var (
	// ErrBusy: another install runs on this node.
	ErrBusy = errors.New("another update is being installed on this node")
	// ErrNoTrust: the cluster configuration trusts no release key.
	ErrNoTrust = errors.New("the cluster trusts no release key")
	// ErrTooLarge: the release's system image does not fit the slot.
	ErrTooLarge = errors.New("the system image does not fit the slot")
	// ErrReadBack: the slot, read back, is not what was written.
	ErrReadBack = errors.New("the written slot does not match the release")
	// ErrReference: the request's reference names no release.
	ErrReference = errors.New("not a release reference")
)

// Installer installs releases. Make it with New.
type Installer struct {
	cfg Config
	// busy is held for the length of an install.
	busy sync.Mutex
}

// New returns an Installer for cfg.
func New(cfg Config) *Installer {
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		}}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Installer{cfg: cfg}
}

// progressEvery is how many bytes pass between two Progress reports of a
// step that moves bytes.
const progressEvery = 8 << 20

// Install installs the release req names into the slot the node is not
// running, and reports each step through progress (called on Install's
// goroutine). It returns once the slot is STAGED, or with an error that
// says which check or step failed.
func (i *Installer) Install(ctx context.Context, req Request, progress func(Progress)) (Result, error) {
	if !i.busy.TryLock() {
		return Result{}, ErrBusy
	}
	defer i.busy.Unlock()
	target := i.cfg.Running.Other()
	if rec, err := ReadSlots(i.cfg.Slots); err == nil && i.onTrial(rec) {
		return Result{}, fmt.Errorf("%w: the other slot is the last good one, which nothing may write until this one is healthy", ErrOnTrial)
	}

	progress(Progress{Step: StepVerify})
	trust, err := i.cfg.Trust(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("when reading the cluster's release keys: %w", err)
	}
	if len(trust.Keys) == 0 {
		return Result{}, fmt.Errorf("%w: add one with cairnctl cluster release-keys add", ErrNoTrust)
	}
	ref, err := ociimage.ParseReference(req.Reference)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrReference, err)
	}
	reg := ref.Registry(i.cfg.Client, slices.Contains(trust.PlainHTTP, ref.Host))
	rel, err := release.Fetch(ctx, reg, ref.Name(), release.Policy{
		Keys:           trust.Keys,
		Architecture:   i.cfg.Architecture,
		Running:        i.cfg.Version,
		AllowDowngrade: req.AllowDowngrade,
	})
	if err != nil {
		return Result{}, err
	}
	// The release's own checks made its verity tree end where its
	// system image does.
	params := rel.Verity
	device, size, err := i.cfg.Partition(target)
	if err != nil {
		return Result{}, fmt.Errorf("when finding system slot %s: %w", target, err)
	}
	if uint64(rel.System().Size) > size {
		return Result{}, fmt.Errorf("%w: release %s's system image has %d bytes, slot %s %d", ErrTooLarge, rel.Version, rel.System().Size, target, size)
	}

	// The system image may be on this node already, and is then not
	// downloaded: in the slot to write (a release staged again after its
	// trial failed) or in the running one (a release that changes only the
	// UKI). A slot's copy counts only once read back whole.
	from, fromDevice := i.systemOnNode(target, device, size, params, progress)

	// What is downloaded is downloaded and checked before anything is
	// written: a blob changed in the registry leaves both slots as they
	// were.
	if err := i.cfg.Spool.MkdirAll(0o700); err != nil {
		return Result{}, err
	}
	system := filepath.Join(i.cfg.Spool.FullPath(), "system.img")
	uki := filepath.Join(i.cfg.Spool.FullPath(), "uki.efi")
	defer os.Remove(system)
	defer os.Remove(uki)
	fetch := func(what, path string, d ociimage.Descriptor) error {
		if err := download(ctx, reg, d, path, func(done int64) {
			progress(Progress{Step: StepDownload + " the " + what, Done: done, Total: d.Size})
		}); err != nil {
			return fmt.Errorf("when downloading release %s's %s: %w", rel.Version, what, err)
		}
		return nil
	}
	if err := fetch("UKI", uki, rel.UKI()); err != nil {
		return Result{}, err
	}
	if from == "" {
		if err := fetch("system image", system, rel.System()); err != nil {
			return Result{}, err
		}
	}

	digest := rel.Descriptor.Digest
	if i.cfg.Firmware != nil {
		// The firmware must never fall back to a slot half written.
		if err := i.cfg.Firmware.Forget(target); err != nil {
			return Result{}, err
		}
	}
	if err := i.record(target, &private.SystemSlots_Slot{State: private.SystemSlots_Slot_WRITING, Version: rel.Version.String(), ReleaseDigest: digest}); err != nil {
		return Result{}, err
	}
	// write writes the image from src, the slot copied's device or
	// the downloaded file (copied ""), and reads it back.
	write := func(src string, copied localstorage.Slot) error {
		step := StepWrite + " slot " + string(target)
		if copied != "" {
			step = StepCopy + " slot " + string(copied) + " to slot " + string(target)
		}
		if err := writeSlot(src, device, rel.System().Size, func(done int64) {
			progress(Progress{Step: step, Done: done, Total: rel.System().Size})
		}); err != nil {
			return fmt.Errorf("when writing system slot %s: %w", target, err)
		}
		progress(Progress{Step: StepReadBack + " slot " + string(target), Total: int64(params.End())})
		if err := checkSlot(device, params); err != nil {
			return fmt.Errorf("system slot %s: %w", target, err)
		}
		return nil
	}
	switch from {
	case target:
		// Read back whole already; nothing to write.
	case i.cfg.Running:
		if err := write(fromDevice, from); err != nil {
			// The running slot's blocks are checked as they are read
			// for the system, not on its raw device: one never read may
			// have changed. The registry has the image.
			progress(Progress{Step: fmt.Sprintf("slot %s's copy is not the release's (%v): downloading it", from, err)})
			if err := fetch("system image", system, rel.System()); err != nil {
				return Result{}, err
			}
			if err := write(system, ""); err != nil {
				return Result{}, err
			}
		}
	default:
		if err := write(system, ""); err != nil {
			return Result{}, err
		}
	}
	progress(Progress{Step: StepUKI})
	if err := i.installUKI(target, uki); err != nil {
		return Result{}, err
	}
	if err := i.record(target, &private.SystemSlots_Slot{
		State:         private.SystemSlots_Slot_STAGED,
		Version:       rel.Version.String(),
		ReleaseDigest: digest,
		Verity:        params.String(),
		UkiPath:       ukiPath(target),
	}); err != nil {
		return Result{}, err
	}
	progress(Progress{Step: StepDone})
	return Result{Slot: target, Version: rel.Version.String(), Digest: digest}, nil
}

// systemOnNode returns the slot of this node that holds the system image
// of p already and its device, or "" for none: target, on device (of size
// bytes), when it reads back whole; else the running slot when the top of
// its hash tree matches (all of it is read back once copied).
func (i *Installer) systemOnNode(target localstorage.Slot, device string, size uint64, p verity.Params, progress func(Progress)) (localstorage.Slot, string) {
	if localstorage.CheckTop(target, device, size, p) == nil {
		progress(Progress{Step: StepReadBack + " slot " + string(target) + ", which may hold the system image already", Total: int64(p.End())})
		err := checkSlot(device, p)
		if err == nil {
			return target, device
		}
		progress(Progress{Step: fmt.Sprintf("slot %s does not hold it (%v)", target, err)})
	}
	running, runningSize, err := i.cfg.Partition(i.cfg.Running)
	if err == nil && localstorage.CheckTop(i.cfg.Running, running, runningSize, p) == nil {
		return i.cfg.Running, running
	}
	return "", ""
}

// download streams the blob d of reg into path, checked against d as it
// streams; on any failure path is removed.
func download(ctx context.Context, reg ociimage.Registry, d ociimage.Descriptor, path string, report func(int64)) (err error) {
	rc, err := release.OpenLayer(ctx, reg, d)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	return copyReporting(f, rc, report)
}

// copyReporting copies src to dst and reports the bytes copied: at the
// start, every progressEvery bytes, and at the end.
func copyReporting(dst io.Writer, src io.Reader, report func(int64)) error {
	report(0)
	c := &counter{w: dst, report: report}
	if _, err := io.Copy(c, src); err != nil {
		return err
	}
	report(c.n)
	return nil
}

// writeSlot copies the first n bytes of src (a file, or a slot's device)
// to the start of device, syncs it, and drops the device's cached pages,
// so that checkSlot reads from the disk, and src's, which nothing reads
// again.
func writeSlot(src, device string, n int64, report func(int64)) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := copyReporting(out, io.NewSectionReader(in, 0, n), report); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := dropCache(in); err != nil {
		return err
	}
	return dropCache(out)
}

// dropCache drops the cached pages of f, which must be synced.
func dropCache(f *os.File) error {
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("when dropping the cached pages of %s: %w", f.Name(), err)
	}
	return nil
}

// checkSlot reads device back and checks that its data hashes to p's root
// hash and that the tree stored after it is the one the data makes.
func checkSlot(device string, p verity.Params) error {
	f, err := os.Open(device)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := dropCache(f); err != nil {
		return err
	}
	tree, err := verity.Compute(io.NewSectionReader(f, 0, int64(p.DataBlocks)*verity.BlockSize), p.Salt)
	if err != nil {
		return fmt.Errorf("when hashing it: %w", err)
	}
	if !bytes.Equal(tree.RootHash, p.RootHash) {
		return fmt.Errorf("%w: its data hashes to %x, the release names %x", ErrReadBack, tree.RootHash, p.RootHash)
	}
	stored := make([]byte, len(tree.Hashes))
	if _, err := f.ReadAt(stored, int64(p.HashOffset)); err != nil {
		return fmt.Errorf("when reading its verity tree: %w", err)
	}
	if !bytes.Equal(stored, tree.Hashes) {
		return fmt.Errorf("%w: the verity tree stored at byte %d is not its data's", ErrReadBack, p.HashOffset)
	}
	return nil
}

// installUKI puts the downloaded UKI at slot's place on the ESP.
func (i *Installer) installUKI(slot localstorage.Slot, src string) error {
	if err := i.cfg.UKIs.MkdirAll(0o700); err != nil {
		return err
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := i.cfg.UKIs.For(slot).WriteFrom(f); err != nil {
		return fmt.Errorf("when installing the UKI of slot %s: %w", slot, err)
	}
	return nil
}

// counter passes writes to w and reports the bytes written so far after
// each write that crosses a multiple of progressEvery.
type counter struct {
	w      io.Writer
	report func(int64)
	n      int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	before := c.n
	c.n += int64(n)
	if c.n/progressEvery != before/progressEvery {
		c.report(c.n)
	}
	return n, err
}
