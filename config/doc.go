// Package config owns oncehook's configuration: the one TOML file described in
// README.md ("Configuration") and documented key by key in config.example.toml
// at the repository root.
//
// The life of a Config is Default() -> parse the file on top -> normalise ->
// Validate(), all done by Load; `oncehook serve` without a file uses Demo.
//
//   - Load reads the file with BurntSushi/toml, refuses unknown keys, applies
//     the defaults (key, retention and ack_status come from the source's
//     provider, via providers.Lookup(...).Defaults()), reads every secret and
//     token file (again on every call: SIGHUP re-reads them), and validates.
//   - Validate checks everything semantic and is idempotent. It leaves the
//     sources as they are; it tries each source's verifier once (from
//     Source.VerifierOptions) only so that a malformed secret is a config
//     error naming its key, and drops it.
//   - Diff tells a SIGHUP handler which changes it can apply live (sources,
//     secrets, admin tokens, log level, max_restore, the admin and cluster
//     TLS files) and which need a restart.
//
// A Config is plain data: it holds no verifier, key rule or compiled schema.
// intake.CompileSource turns a Source into what serves it, the same for
// `oncehook serve`, a SIGHUP reload and `oncehook validate`; the keys_url key
// sets (package keyset) build their verifiers from the same VerifierOptions.
//
// Errors are *Error values of the form `file:line: key: message`, joined with
// errors.Join so that one run reports every problem. Lines come from toml's
// own positions where they are right, and otherwise from a small scanner
// (scan.go) that knows the ordinal of each [[source]].
//
// Invariants:
//   - A secret never appears in an error, a log line, fmt output or JSON:
//     Secret prints "<redacted>" in every form, and errors name a secret's
//     key and file, never its bytes.
//   - Secret, token and TLS key files readable by others (mode & 0o004) or
//     writable by group or others (mode & 0o022) are refused, the way ssh
//     refuses an unprotected private key; so is a config file readable by
//     others that holds secrets or tokens inline, and any config file
//     writable by others (who would choose the node's secret files).
//   - Cluster and admin tokens are at least MinTokenLen (32) bytes, and a
//     [cluster] table needs token_file or mutual TLS.
//   - Load has no side effects; a failed Load returns no Config, so a reload
//     with a bad file keeps the running one.
//
// Imports: the standard library, BurntSushi/toml and oncehook/providers (for
// per-provider defaults, key part syntax and to try verifiers). It must not import fasthttp,
// raft, bbolt, or oncehook's engine, cluster or forward packages; a test
// (TestDependencyRule) keeps it so.
package config
