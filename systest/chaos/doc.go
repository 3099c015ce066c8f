// Package chaos is oncehook's fault-injection suite: three real oncehook
// processes, each in its own network namespace on a bridge, a client
// namespace holding the instrumented handler (cmd/chaoshandler) and the
// test's load generator, faults injected with signals, iptables, small tmpfs
// mounts, failpoints inside oncehook (the binary is built with -tags
// failpoints, see package failpoint: crashes at chosen points and a per-node
// test clock), and a block-I/O cgroup capping the write IOPS of a node's own
// loop-mounted ext4 (slow disk); checks at the end of every scenario (lost
// acknowledgements, a porcupine linearizability check of the per-key claims,
// double runs, fencing, replica convergence, availability). It also holds the
// hostile-input suite (H1-H20) and security checks against a single loopback
// node, and the mutual-TLS rejection tests against a three-node loopback
// cluster. Everything lives in _test.go files; see RELIABILITY.md.
package chaos
