// Package update installs signed Cairn releases (pkg/release) into the
// system slot the node is not running. It is the first half of an OS
// update; booting the new slot for a trial, and making it the default once
// it has proved itself, are not built yet (docs/updates.md).
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
// The running slot is never written. Every refusal says which check
// failed. A power cut at any step leaves the running slot and its UKI as
// they were, and the record saying WRITING (or the old state before step
// 4), so the next install simply starts over; an interrupted download is
// started over too.
package update
