// Package systest holds tests that build the oncehook binary and run it as a
// user would: real processes on loopback ports, real config files, real
// signals. It imports providers (to sign like a sender) and the test harness
// (internal/testcluster: processes, configs, readiness, the leader;
// internal/testproc: children that die with the test, cleanup on every exit
// path), nothing else of ours.
package systest
