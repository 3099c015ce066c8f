// Package idleconn tells whether a kept-alive connection that sat idle may
// carry the next request.
//
// Both ends of oncehook keep connections open between requests: the
// forwarder's connections to a handler (forward) and a follower's relay
// streams to the leader (cluster). A protocol of one answer per request
// reads the next bytes after a request as its answer, so a connection may
// be reused only when it holds nothing unread and its peer has not closed
// it; a handler that once answered twice, or sent a body after a 204,
// would otherwise have its stray bytes taken for the answer to the next
// event, which may belong to another source. docs/architecture.md,
// "Delivery", says why the forwarder keeps its own connections.
//
// It owns that check only; it imports nothing of oncehook's.
package idleconn
