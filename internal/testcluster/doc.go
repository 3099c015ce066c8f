// Package testcluster is the one process harness of oncehook's system tests:
// it builds the binary once (Build), finds free loopback ports, writes node
// configs (NodeConfig), starts, stops, kills and restarts real oncehook
// processes (Proc, Cluster), waits for readiness and finds the leader over
// the admin API, and has the one polling helper (WaitFor: poll a condition
// with a deadline, never sleep and hope). Every process goes through package
// testproc, so it dies with the test binary and is stopped by process group.
//
// It has two layers. The lower one returns errors and takes no testing.TB
// (Launch with a Spec, Await, ReservePorts, AwaitReady, Ready, FetchStatus,
// AgreedLeader): the bench command spawns its nodes with it, and a Spec can
// wrap the command (the chaos suite's `ip netns exec NS`), add environment
// and append the output to a log file. The testing.TB helpers (StartProc,
// StartSpec, WaitFor, FreePorts, Cluster) are built on it and fail the test
// where it returns an error.
//
// Only test and benchmark code imports it (the dependency test of package
// testproc keeps it so). Of ours it imports testproc and providers (to make
// a source secret), never the engine, cluster or main package: it drives the
// binary from outside, as an operator would.
package testcluster
