// Package adminclient is the admin API's HTTP client that the CLI's client
// commands (status, events, replay, pause and resume, purge, raft,
// snapshot) use: it resolves the admin address, the token and the CA bundle
// from their flags and environment (Flags), sends the requests with the
// bearer token, turns an error answer into an error with the API's text, and
// prints the answers: typed ones (status, the events page, the peers) as
// tables, the others as the node sent them, indented with keys sorted and
// numbers untouched, whatever fields the node's version has. The routes and
// their JSON shapes are docs/reference.md's; testdata/client/*.golden holds
// what the commands print.
//
// # What it must not import
//
// Of ours, admin (the API's wire types) and cluster (its Status type) only:
// never the intake, the forwarder, the engine or package main, nor raft,
// bbolt or fasthttp. TestDependencyRule keeps it so.
package adminclient
