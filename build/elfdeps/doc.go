// Package elfdeps finds everything the dynamic loader needs to start a set
// of host binaries, so the image builder can carry dynamically linked tools
// (Debian's mkfs.xfs, for one) into an image that has no package
// manager and no ld.so.cache: the system image (build/system).
//
//	binary ──▶ PT_INTERP ─────────────────────────────▶ interpreter
//	   │
//	   └──▶ DT_NEEDED ──▶ search: DT_RPATH (if no DT_RUNPATH),
//	            ▲                 DT_RUNPATH, default dirs
//	            │                     │
//	            └──── library ◀───────┘   (repeated until no name is new)
//
//	every path found ──▶ symlinks followed ──▶ Files: links and regular files
//
// The search follows glibc's order for a loader without a cache: the
// requesting object's DT_RPATH when it has no DT_RUNPATH, then its
// DT_RUNPATH, then the default directories (Debian's multiarch ones first).
// Candidates of another ELF class or machine are skipped, as the loader
// skips them.
//
// Each path the loader will open lands in the result at the same place, and
// a symlink in its last component is kept as a symlink next to its target,
// so the layout inside the image mirrors the host's. Directory symlinks of
// the host (a merged /usr's /lib -> usr/lib) are not reproduced: the
// directories become real ones, which the loader cannot tell apart.
//
// The inputs are the build machine's own binaries, trusted like the
// compiler; still, a truncated or foreign file gives an error, never a
// panic.
package elfdeps
