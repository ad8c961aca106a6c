// Package release is Cairn's OS release artifact: what a release is in an
// OCI registry, how the release key signs it, and how a node checks one
// before it writes a byte of it to a disk. The build (build/release) makes
// and signs releases with it; nodes verify them with it.
//
//	release manifest (artifactType application/vnd.cairn.release.v1)
//	 ├─ config: Metadata (version, commit, Kubernetes, architecture,
//	 │          cairn.verity=…, sizes)                      JSON
//	 ├─ layer:  the unified kernel image                    MediaTypeUKI
//	 └─ layer:  the system image and its hash tree          MediaTypeSystem
//	        ▲ subject
//	signature manifest (artifactType …release.signature.v1), also tagged
//	 │                   sha256-<manifest hex>.sig
//	 └─ layer:  Signature {key ID, ed25519 over
//	            "cairn release signature v1\x00" + manifest digest}
//
// # Why sign the manifest digest
//
// The manifest names every other blob by its SHA-256, so one signature over
// its digest pins the metadata, the kernel image and the system image. A
// node that checks, in this order, that the manifest matches its digest,
// that a trusted key signed that digest, that the config matches the
// manifest, and that every layer matches as it streams (DigestReader), has
// verified every byte against the key without trusting the registry. The
// message is domain-separated so that no other signature of the same key
// can pass for a release's.
//
// # Why a second manifest for the signature
//
// The signature cannot live in the manifest it signs. A separate manifest
// whose subject is the release is what OCI 1.1 registries list as a
// referrer; registries without the referrers API still serve it under the
// tag sha256-<hex>.sig, which is where Fetch looks. Either way the
// signature's own bytes need no trust: they verify or they do not.
//
// # Versions
//
// A release of a commit tagged vX.Y.Z is version X.Y.Z; any other commit
// is 0.0.0-<commit time, UTC, YYYYMMDDhhmmss>-<12 hex digits of the
// commit>, with ".dirty" appended when the work tree had changes. Versions
// order as semantic versions do, so commit versions order by commit time
// and sort before every tagged release; see Version.
package release
