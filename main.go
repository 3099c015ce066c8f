// Command oncehook receives webhooks at least once and runs their effect
// exactly once. See README.md (the front door), docs/operations.md for the
// operator's manual and docs/architecture.md for the design and its
// invariants.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"oncehook/adminclient"
	"oncehook/engine"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if msg, code := exitStatus(err); code != 0 {
		if code == 1 || msg != "" {
			fmt.Fprintln(os.Stderr, "Error:", msg)
		}
		os.Exit(code)
	}
}

// exitStatus is what the process prints after "Error:" and its exit code for
// run's err: 2 and the message for a usage error (the client flags' too,
// adminclient.UsageError), 0 and nothing more for -h (the usage is printed
// already, and asking for help is not a mistake: "oncehook -h" exits 0 too),
// 1 and the error otherwise.
func exitStatus(err error) (string, int) {
	var ue usageError
	var cue adminclient.UsageError
	switch {
	case err == nil:
		return "", 0
	case errors.Is(err, flag.ErrHelp):
		return "", 0
	case errors.As(err, &ue):
		return ue.msg, 2
	case errors.As(err, &cue):
		return cue.Msg, 2
	}
	return err.Error(), 1
}

// usageError is a mistake in how a command was called (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `oncehook: receive webhooks at least once, run their effect exactly once.

Usage:
  oncehook serve    [-config oncehook.toml]      run a node (no file: demo single node on ./data)
  oncehook validate -config F                    check a config file
  oncehook sink     [-listen 127.0.0.1:9000]     a reference local handler
  oncehook send     -config F -source S -file P  sign P as S's provider does and POST it
  oncehook keygen   [-provider standard]         print a new secret
  oncehook status | events [show KEY] | replay   talk to a node's admin API
  oncehook pause | resume -source S -reason R    hold or release a source's deliveries
  oncehook purge -state S -before T -reason R    delete dead, done or stale events [-source, -dry-run]
  oncehook raft list-peers | remove-peer -id N   cluster membership
  oncehook raft transfer-leader [-to N]          hand leadership over (deliveries in flight finish first)
  oncehook snapshot save F | restore F           consistent backup and restore
  oncehook version

Client commands find the node with -addr or ONCEHOOK_ADDR and the token with
-token-file, ONCEHOOK_TOKEN_FILE or ONCEHOOK_TOKEN (in that order); an https:// address or
-ca FILE (ONCEHOOK_CA) for a TLS admin listener.
`

// run is the whole program behind main, callable from tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "sink":
		return cmdSink(ctx, rest, stdout, stderr)
	case "send":
		return cmdSend(ctx, rest, stdout, stderr)
	case "keygen":
		return cmdKeygen(rest, stdout, stderr)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr)
	case "events":
		return cmdEvents(ctx, rest, stdout, stderr)
	case "replay":
		return cmdReplay(ctx, rest, stdout, stderr)
	case "pause":
		return cmdPause(ctx, rest, stdout, stderr, true)
	case "resume":
		return cmdPause(ctx, rest, stdout, stderr, false)
	case "purge":
		return cmdPurge(ctx, rest, stdout, stderr)
	case "raft":
		return cmdRaft(ctx, rest, stdout, stderr)
	case "snapshot":
		return cmdSnapshot(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		return cmdVersion(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if cmd == "help" && len(rest) > 0 && !isHelp(rest[0]) && !strings.HasPrefix(rest[0], "-") {
			// oncehook help status: the command's own help, as status -h.
			return run(ctx, []string{rest[0], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

// cmdVersion prints the version; it takes no flag but -h.
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: oncehook version\n\nPrints the release, its commit, the data format it writes and the Go\nversion it was built with.\n")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return usageError{fmt.Sprintf("version takes no arguments, got %q", fs.Arg(0))}
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}

func versionString() string {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
				if len(rev) > 12 {
					rev = rev[:12]
				}
			}
		}
	}
	// The data format matters on an upgrade: a node refuses data written by a
	// newer format (docs/operations.md, Upgrades).
	return fmt.Sprintf("oncehook %s (commit %s, data format %d, %s %s/%s)", version, rev, engine.FormatVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newFlags makes a FlagSet that reports errors instead of exiting. Its
// usage goes to stderr after a mistake and to stdout when asked for with
// -h (parseFlags), as `oncehook --help` does: `oncehook send -h | less`.
func newFlags(name string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("oncehook "+name, flag.ContinueOnError)
	fs.SetOutput(&flagOutput{stdout: stdout, stderr: stderr})
	return fs
}

// flagOutput is a FlagSet's output: stderr, and stdout for the usage asked for.
type flagOutput struct{ stdout, stderr io.Writer }

func (o *flagOutput) Write(p []byte) (int, error) { return o.stderr.Write(p) }

// parseFlags parses args with fs. On -h it prints the usage and returns
// flag.ErrHelp (exit 0); on a bad flag it prints the usage and returns the
// mistake as a usageError, which main prints once, after the usage, as
// "Error: ...". The flag package would print the mistake itself too, before
// the usage: it is kept quiet while parsing so the message is not shown twice.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		if o, ok := out.(*flagOutput); ok {
			fs.SetOutput(o.stdout)
			fs.Usage()
			fs.SetOutput(out)
			return err
		}
		fs.Usage()
		return err
	}
	fs.Usage()
	return usageError{err.Error()}
}

// isHelp reports whether arg asks for help, as the flag package reads it
// (and "help", as "oncehook help" does): for the commands that take a
// subcommand before their flags (raft, snapshot), where "-h" would
// otherwise be taken for the subcommand's name.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h", "help":
		return true
	}
	return false
}

// parseInterspersed parses args with fs, allowing flags after the
// arguments too ("events show KEY -addr X"), and returns the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// noArgs refuses arguments left after the flags of a command that takes
// none: silently ignored, a key given as an argument would look acted on.
// hint says what to write instead, if anything.
func noArgs(fs *flag.FlagSet, hint string) error {
	if fs.NArg() == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), fs.Args())
	if hint != "" {
		msg += ": " + hint
	}
	return usageError{msg}
}
