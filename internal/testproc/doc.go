// Package testproc owns the processes, and the machine state, that oncehook's
// tests and benchmarks create outside their own process: every child they
// spawn (oncehook nodes, the chaos handler, helpers such as `ip netns exec`,
// mount or losetup), and the run directory, network namespaces, mounts, loop
// devices and cgroups they make. Only test and benchmark code imports it
// (TestOnlyTestCodeImports keeps it so); it imports nothing of ours.
//
// Invariants:
//
//   - A child dies with the test binary, however the binary ends. Start puts
//     each child in its own process group and asks the kernel to SIGKILL it
//     when its parent dies (Linux PR_SET_PDEATHSIG). The kernel means the
//     parent *thread*: the child is killed when the OS thread that forked it
//     exits, and the Go runtime ends a thread when a goroutine locked to it
//     returns without unlocking (the chaos suite's namespace dialers do just
//     that). So every fork happens on one goroutine that locks its thread and
//     never returns: the thread lives exactly as long as the process.
//   - A child is stopped by process group, so what it forked goes with it.
//   - Every child carries EnvRun=<pid of the test binary> in its environment:
//     the mark that tells a leftover of ours from anything else on the machine.
//   - Everything else a run makes is named with Prefix and the run's PID
//     (NamePrefix), and lives under the run directory where it is a path. A
//     cleanup is registered before the resource is made (Cleanup), and it
//     also runs when the binary is stopped by SIGINT or SIGTERM (Begin).
//   - What a `go test -timeout` panic leaves (the runtime exits without
//     running cleanups; the children still die by the signal above) is removed
//     by Sweep at the start of the next run or by `make chaos-clean`. Sweep
//     touches only what is marked or named for a run whose PID is gone.
package testproc
