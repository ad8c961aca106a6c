// Package modules chooses which of the Debian kernel's modules Cairn
// carries. The kernel package ships some four thousand modules, about 400
// MB; Cairn carries a chosen set: the modules whose paths start with one of
// the prefixes in Carried, plus everything those need according to
// modules.dep. The system partition holds that set; the initramfs holds
// only Early, what it takes to reach the system partition, since under
// software emulation every megabyte of initramfs costs boot time.
//
//	modules.dep (full tree) ──▶ Select(prefixes) ──▶ Closure ──▶ Set
//	                                                              │
//	modules.alias, modules.softdep ── filtered to the Set ◀──────┤
//	modules.builtin ── copied as is ◀────────────────────────────┤
//	*.ko, *.ko.xz, *.ko.zst ── decompressed to *.ko ◀────────────┘
//
// Each result is a module directory (lib/modules/<release>) in memory whose
// indexes name only carried modules, so /init's coldplug never looks for a
// module that is not there, and whose modules.builtin lets /init skip what
// the kernel already has built in.
package modules
