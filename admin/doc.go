// Package admin is the operator's listener ([admin] listen, net/http,
// optional TLS): the /v1 API (status, events, replay, purge, pause and
// resume, cluster membership, backup and restore), /metrics, /livez and
// /readyz, pprof, and the dead-letter page under /ui/ with its embedded
// templates and stylesheet (web/). The routes, their answers and their JSON
// shapes are docs/reference.md's.
//
// # What it owns
//
//   - Authentication: every route but /metrics needs a bearer token from
//     [admin] tokens (the token's name is the "who" of a replay); the page
//     signs in once and keeps a server-side session. A client address that
//     keeps presenting wrong tokens is backed off (authlimit.go).
//   - The listener's limits: timeouts, header size, the restore upload's
//     max_restore, and the stream deadlines of backup and restore (Timeouts).
//   - The API's wire types that the CLI shares (Event, ReplayRequest,
//     PauseRequest, PurgeRequest), and the sources' pause and backlog
//     gauges (NewSourceCollector).
//
// # What it promises
//
// Secrets never appear in an answer: a config prints them redacted, and the
// page's cookies carry a random session id, never a token
// (docs/architecture.md, Invariants 7 and 9). Every write is a command
// committed through Store; the API decides nothing the engine does not.
//
// # What it must not import
//
// It sees the replicated store through Store, declared here and satisfied by
// the cluster node; of cluster it uses the Status type and the error
// sentinels it maps to status codes, never raft. It does not import the
// intake, the forwarder, providers or fasthttp. TestDependencyRule keeps it
// so.
package admin
