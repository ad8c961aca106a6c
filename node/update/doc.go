// Package update installs signed Cairn releases (pkg/release) into the
// system slot the node is not running (Install), boots it once through the
// firmware for a trial (Activate: BootNext), and makes it the default once
// the node is healthy on it, or records it bad when its trial did not end
// healthy (JudgeBoot, at every boot); docs/updates.md tells the whole
// path.
//
//	Install(reference)
//	  │ 1. policy: the release keys the cluster trusts, the running version,
//	  │    the node's architecture           ── none trusted: refused
//	  │ 2. release.Fetch: manifest, signature, config, architecture, version
//	  │                                      ── refused before any download
//	  │ 3. download both layers into the data partition (Data.Update),
//	  │    each checked against its digest as it streams
//	  │                                      ── refused before any write
//	  │ 4. record: the other slot is WRITING (system_slots.pb on the ESP)
//	  │ 5. copy the system image into the other slot, sync, drop the cached
//	  │    pages, read it back and recompute its verity tree: the root hash
//	  │    and the stored tree must be the release's
//	  │ 6. its UKI to EFI/cairn/system-<slot>.efi (atomic)
//	  ▼ 7. record: the other slot is STAGED, with the release's version
//
// Then, unless only staging:
//
//	Activate        running slot GOOD, its UKI kept in EFI/cairn; a boot
//	  │             entry for the new slot's UKI, BootNext = it; TRIAL
//	  ▼ (reboot through the firmware, which clears BootNext)
//	JudgeBoot       trial boot: healthy within the deadline ─▶ BootOrder
//	                first, its UKI to EFI/BOOT/BOOTX64.EFI, GOOD; else
//	                the reason recorded, reboot
//	                any other boot: the other slot on TRIAL ─▶ BAD, with
//	                the reason: "rolled back from <version>: <reason>"
//
// The running slot is never written. Every refusal says which check
// failed. A power cut at any step leaves the running slot and its UKI as
// they were, and the record saying WRITING (or the old state before step
// 4), so the next install simply starts over; an interrupted download is
// started over too.
package update
