// Package keyset keeps the published, rotating keys of the sources that
// have a keys_url (docs/sources.md, "Published keys").
//
// # What it owns
//
// A Manager holds one key set per keys_url source, across reloads (Attach):
// it fetches the source's keys document at start and every keys_refresh,
// keeps the last good copy on disk under data_dir/keys/ so that a restart
// works while the URL is down, honours each key's not-before and expiry, and
// fetches early (rate-limited) when a delivery's signature matches no key in
// force. The source's verifier becomes one over those keys (and its static
// secrets, tolerance and hmac table: config.Source.VerifierOptions, as
// intake.CompileSource builds from), given to the intake's compiled sources
// through Sources. Fetches
// follow the redirect policy of redirect.go (docs/security.md): https only
// (http to loopback), and a redirect reaches a public address or one of the
// configured URL's own class.
//
// # What it promises
//
// A fetch that fails is logged and counted (Metrics) and changes nothing:
// the keys held keep verifying until they expire. A document with any
// mistake but an unknown alg is refused whole. Errors and logs never quote
// key material.
//
// # What it must not import
//
// Of ours, config and providers only: not the intake (it sees the compiled
// sources through Sources), nor cluster, engine or forward, nor fasthttp.
// TestDependencyRule keeps it so.
package keyset
