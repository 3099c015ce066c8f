// Package powercut holds oncehook's power-cut system tests: three real
// oncehook processes (built with -tags failpoints, driven by package
// internal/testcluster), each with its data dir on its own FUSE mount of
// package internal/powercut, which loses every write not yet fsynced when the
// test cuts the power. A cut SIGKILLs the node's process, undoes its unsynced
// writes, remounts, changes the node's boot id (failpoint.EnvBootIDFile: the
// machine rebooted) and starts it again. The engine file, written without
// fsync and trusted after a restart only under the same boot id, must then be
// rebuilt from the newest snapshot and the fsynced Raft log.
//
// Checks after every scenario: every acknowledged (2xx) event is stored on
// every node and delivered; each key's deliveries carry strictly growing
// fencing tokens and none starts while an earlier one of the key is still
// running; redeliveries only where a leader was cut; the replicas converge
// (the same engine content hash at the same applied index, from GET
// /v1/backup); each cut node logged the rebuild of its engine file. Figures
// (unavailability, catch-up) are logged; docs/reliability.md, "Power cuts",
// has the table.
//
// `go test ./systest/powercut` runs the leader cut; ONCEHOOK_POWERCUT=1 runs
// every scenario (make powercut). Everything skips with the reason without
// root, /dev/fuse or the fuse3 package, and in -short mode. Everything lives
// in _test.go files.
package powercut
