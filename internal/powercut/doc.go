// Package powercut is a test harness: a FUSE loopback file system that loses
// every write not yet made durable by fsync or fdatasync when the test cuts
// the power, in the manner of LazyFS.
//
// Mount serves a backing directory at a mount point. Reads, writes and
// metadata operations go straight through to the backing files (so a reader,
// including one that mmaps the file as bbolt does, sees every write at once:
// direct I/O stays off and the kernel's page cache of the mount stays
// coherent because every write passes through it). What a write or a truncate
// destroys is remembered per file: the file's size at its last fsync and the
// original content of every 4 KiB block changed since. Fsync or fdatasync of
// any handle of the file forgets that, as the data is now durable.
//
// Cut is the power cut: the file system first refuses every further open,
// read, write, truncate and sync (EIO), is unmounted, and then every file's
// unsynced changes are undone in the backing directory: it is truncated to
// its last synced size and its saved blocks are written back. Remounting the backing directory
// (Mount again) is the machine coming back up. The processes that used the
// mount must be killed before Cut (a power cut kills them too); a file they
// still hold open keeps the mount busy and Cut falls back to a lazy unmount.
//
// CutWith tears instead: each changed block, and each changed file's size,
// independently keeps its new state with a given probability (the kernel had
// written it back), from a seeded generator.
//
// Limits, deliberately: metadata operations (create, rename, unlink, mkdir,
// rmdir, link, chmod) are durable at once, as if every directory were synced
// after each; a torn cut chooses per 4 KiB block, not per sector, and knows
// no write order (a later block may survive an earlier one); a file opened
// with O_SYNC or O_DSYNC is treated like any other (its writes are lost until
// an fsync);
// fallocate is refused except for plain allocation; the content of a file
// unlinked before the cut is not restored. docs/reliability.md ("Power cuts")
// says what this does and does not prove.
//
// Mounting needs root and /dev/fuse (Available says why it cannot). The
// package is for tests and benchmarks only: product code never imports it
// (internal/testproc's dependency test keeps it so), and of ours it imports
// nothing.
package powercut
