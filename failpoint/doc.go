// Package failpoint holds oncehook's fault-injection hooks for the chaos
// suite (systest/chaos; systest/chaos/RELIABILITY.md, "Failpoints").
//
// A release build (no build tag) compiles every hook to nothing: Enabled is the
// constant false, Inject has an empty body that the compiler inlines away, and
// no environment variable is read, so neither the hook names nor the variable
// names below end up in the binary (TestReleaseBinaryHasNoFailpoints checks
// the built oncehook binary). Built with -tags failpoints, each process reads:
//
//	ONCEHOOK_FAILPOINTS="name=panic;name2=sleep(2s)"   hooks armed from the start
//	ONCEHOOK_FAILPOINTS_FILE=/path                     the same syntax, re-read
//	                                                   every 100 ms (arm and disarm
//	                                                   during a run; a missing file
//	                                                   arms nothing)
//	ONCEHOOK_TEST_CLOCK_OFFSET_FILE=/path              a Go duration ("10m", "-6s")
//	                                                   added to Now, re-read every
//	                                                   100 ms (a per-process clock jump)
//	ONCEHOOK_TEST_BUCKET_WIDTH=1s                      the retention bucket width of an engine
//	                                                   file this process creates (default one
//	                                                   hour; a file that exists keeps its own)
//	ONCEHOOK_TEST_EXPIRE_INTERVAL=100ms                how often the leader's sweeper ends the
//	                                                   retention buckets that ended (default one
//	                                                   minute)
//	ONCEHOOK_TEST_BOOT_ID_FILE=/path                   the machine's boot id as the cluster sees it
//	                                                   (read at each node start; missing or empty:
//	                                                   the kernel's): a changed id is a reboot, so
//	                                                   an engine file written unsynced is rebuilt
//	                                                   (systest/powercut)
//
// Actions: panic (the process crashes with "failpoint NAME"), sleep(DURATION),
// off. The file entries are merged over the variable's, name by name. The
// package never reads oncehook's configuration.
package failpoint

// The hooks, where they sit and what they emulate.
const (
	// AfterClaimApplyBeforeResponse: cluster.Node.Claim, after the claim
	// committed and applied, before the intake writes its 2xx (a crash after
	// the commit, before the answer).
	AfterClaimApplyBeforeResponse = "afterClaimApplyBeforeResponse"
	// AfterHandlerDoneBeforeApply: forward, after the handler answered 2xx,
	// before Complete is proposed (a crash between the effect and its record).
	AfterHandlerDoneBeforeApply = "afterHandlerDoneBeforeApply"
	// BeforeSnapshotPersist: cluster's FSM snapshot Persist, before the state
	// is written to the snapshot sink (a crash mid-snapshot).
	BeforeSnapshotPersist = "beforeSnapshotPersist"
)

// Environment variables read by the failpoints build only.
const (
	EnvSpec      = "ONCEHOOK_FAILPOINTS"
	EnvFile      = "ONCEHOOK_FAILPOINTS_FILE"
	EnvClockFile = "ONCEHOOK_TEST_CLOCK_OFFSET_FILE"

	// The retention knobs (knobs_on.go): a system test watches a bucket end,
	// or a dead letter outlive its source's retention, in seconds.
	EnvBucketWidth    = "ONCEHOOK_TEST_BUCKET_WIDTH"
	EnvExpireInterval = "ONCEHOOK_TEST_EXPIRE_INTERVAL"

	// The boot id override (knobs_on.go): a power-cut test simulates the
	// machine's reboot.
	EnvBootIDFile = "ONCEHOOK_TEST_BOOT_ID_FILE"
)
