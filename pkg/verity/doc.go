// Package verity computes dm-verity hash trees, so that a read-only image
// built on one machine can be checked block by block by the kernel of
// another, and carries the few numbers the kernel needs to do that from
// the build to the node's command line.
//
// A hash tree pins every 4096-byte block of an image to one 32-byte root
// hash: whoever holds the root hash (Cairn puts it on the unified kernel
// image's command line, which the firmware measures and later signs) can
// tell any changed block apart when it is read, without reading the rest.
//
//	data blocks   D0  D1  D2 … D127  D128 …               (the filesystem)
//	               │   │   │     │     │
//	level 0       [h(D0) h(D1) … h(D127)] [h(D128) …] …   one block per 128
//	                        │                  │
//	level 1                [h(L0B0)  h(L0B1)  …]          …up to one block
//	                                 │
//	root hash              h(salt ‖ top block)
//
// Every h is SHA-256 over the salt followed by one whole block (dm-verity's
// format version 1). A hash block holds 128 digests and is zero-filled
// after the last. The tree is written top level first, level 0 last, which
// is the order veritysetup writes and the kernel expects.
//
// # Layout on disk
//
// Cairn uses no verity superblock: the tree starts right after the data,
// on the same partition, at HashOffset bytes (a whole number of blocks).
// Everything the kernel's table needs, the root hash, the salt, the number
// of data blocks and the hash offset, travels as Params, whose text form
//
//	<root hash hex>,<salt hex>,<data blocks>,<hash offset in bytes>
//
// is what a node reads from its command line (ParseParams). The tree is
// byte for byte what `veritysetup format --no-superblock` writes for the
// same data and salt, which the tests check.
package verity
