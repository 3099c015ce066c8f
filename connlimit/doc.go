// Package connlimit keeps a listener serving through a connection flood.
//
// It owns the accept loop's resilience and the connection caps of the
// node's three listeners (intake, admin, cluster port; docs/security.md,
// "Connection floods"):
//
//   - A transient accept error (the process or the system is out of file
//     descriptors, buffers or memory, a connection aborted before it was
//     taken) is waited out with a backoff, never returned: returning it
//     ends a server's Serve loop, and with it the node.
//   - Connections are capped in total and per client network (an IPv4
//     address, an IPv6 /64, since one holder of a /64 has 2^64 addresses); a
//     connection over a cap is closed at once, after an optional refusal
//     (the intake writes a 503 or 429), and counted. Over the total cap, a
//     new connection its network's cap allows first takes the place of the
//     one that has waited longest for a whole request head, since it
//     connected or since its last answer (an HTTP server reports which are
//     served through Listener.ConnState): silent, trickling or idle
//     connections cost their holder nothing, and thousands of them must
//     not keep every other client out until the server's timeouts.
//   - Caps derives the caps from the process's file descriptor limit, so
//     that a flood on one listener leaves descriptors for the others, the
//     Raft log, the engine and outgoing deliveries.
//
// Counter (for the cluster port) applies the same per-network caps to
// connections that have not authenticated yet, released by the caller once
// they have.
//
// connlimit imports only the standard library; it must not import any
// oncehook package.
package connlimit
