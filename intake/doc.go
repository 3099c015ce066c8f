// Package intake is the public webhook listener: the fasthttp server that
// answers POST /in/{source}, /livez and /readyz on [node] listen.
//
// # What it owns
//
//   - The request path, in the order of docs/architecture.md, Request flow:
//     the cheap refusals decided from the request line and the headers (404,
//     405, 403, 415, 413 before the body is read past what fasthttp holds),
//     then verify (401), handshakes, the JSON validity check (jsonvalid.go),
//     the type filter (200 filtered), the schema_file (schema.go), the order
//     fields (order.go), the key (400), the duplicate shortcut on applied
//     state, the claim and the answer.
//   - The answers, written by hand without an encoder; their bodies and
//     status codes are docs/reference.md's and part of the product's surface.
//   - Compiling sources: CompileSource is the one function that turns a
//     config.Source (plain data) into a ready Source: verifier and
//     handshaker, key rule, order and type fields, schema, limits. Compile
//     builds a Set with it, for `oncehook serve` at start, a SIGHUP reload
//     and `oncehook validate` alike, so validate refuses exactly what serve
//     would. A keys_url source's verifier is replaced by its key set
//     (package keyset, Set.UseVerifier) before the Set is served. A Set is
//     swapped whole on reload (Server.SetSources).
//   - Sync mode (sync.go): waiting for the handler's first answer, and the
//     re-arm of a dead event by the provider's retry.
//   - The server's limits against hostile clients (timeouts, header size,
//     per-address connections, bodies streamed and bounded by max_body).
//
// # What it promises
//
// A 2xx for a new event is written only from the result of Store.Claim,
// which returns once the claim is committed; every Claim error is 503 with
// Retry-After but a command the engine refuses as malformed, 400
// (docs/architecture.md, Invariants 1). A refused request stores
// nothing (Invariants 8). The duplicate shortcut reads applied, hence
// committed, state only.
//
// # What it must not import
//
// The intake sees the replicated store through Store, declared here and
// satisfied by the cluster node; the cluster errors it answers as a loss of
// quorum reach it through Options.NotCommitted, given by package main. So it
// imports none of cluster, forward, raft, bbolt or net/http's server side
// (the admin API lives elsewhere). Of ours it imports engine (types and
// errors), providers (verifiers, keys, fields), config (to compile
// sources) and connlimit (a client's network, for the body budget).
// TestDependencyRule keeps it so.
package intake
