package intake

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"oncehook/config"
	"oncehook/providers"
)

// Compile turns the config's sources into the hot path's form, each by
// CompileSource; the first source that does not compile fails the whole set
// (a start is refused, a reload keeps the running set).
func Compile(sources []config.Source) (*Set, error) {
	set := &Set{byName: make(map[string]*Source, len(sources))}
	for i := range sources {
		src, err := CompileSource(sources[i])
		if err != nil {
			se := &SourceError{Index: i, Err: err}
			var st settingError
			if errors.As(err, &st) {
				se.Setting = st.setting
			}
			return nil, se
		}
		if src.maxBody > set.maxBody {
			set.maxBody = src.maxBody
		}
		set.byName[src.name] = src
	}
	return set, nil
}

// CompileSource turns one configured source into a ready Source: the
// verifier (and handshaker) built from its secrets, the key rule, the order
// and type fields, the schema (compiled once per load) and the answers'
// settings. It is the one place a config.Source becomes what serves it:
// `oncehook serve` at start, a SIGHUP reload and `oncehook validate` all
// call it (through Compile), so validate refuses what serve would. It reads
// the schema file and changes nothing in s.
//
// A keys_url source verifies with its static secrets, or refuses every
// delivery when it has none, until its key set (package keyset) gives it a
// verifier over the fetched keys (Source.UseVerifier).
func CompileSource(s config.Source) (*Source, error) {
	verifier, err := compileVerifier(&s)
	if err != nil {
		return nil, settingError{"secrets", fmt.Errorf("source %s: %w", s.Name, err)}
	}
	keyer, err := providers.NewKeyer(s.Name, s.Key)
	if err != nil {
		return nil, settingError{"key", fmt.Errorf("source %s: key: %w", s.Name, err)}
	}
	src := &Source{
		name:       s.Name,
		provider:   s.Provider,
		verifier:   verifier,
		keyer:      keyer,
		escapedKey: len(s.Key) > 1,
		fwdHeaders: uniqueNames(s.ForwardHeaders),
		allow:      s.AllowIPs,
		trusted:    s.TrustedProxies,
		ack:        s.AckStatus,
		sync:       s.Mode == "sync",
		maxBody:    int(s.MaxBody),
		retention:  int64(time.Duration(s.Retention)),
		leaseFor:   int64(time.Duration(s.Lease)),
		guardBody:  s.ReplayGuard == config.ReplayGuardBody,
		waitFor:    time.Duration(s.ForwardTimeout) + 2*time.Second,
	}
	if h, ok := verifier.(providers.Handshaker); ok {
		src.handshaker = h
	}
	if s.SchemaFile != "" {
		// Compiled once per (re)load; a schema that does not compile
		// rejects the load and keeps the running configuration.
		if src.schema, err = compileSchema(s.SchemaFile); err != nil {
			return nil, settingError{"schema_file", fmt.Errorf("source %s: %w", s.Name, err)}
		}
	}
	if err := src.compileOrder(s.Order); err != nil {
		return nil, settingError{"order", fmt.Errorf("source %s: %w", s.Name, err)}
	}
	if err := src.compileTypeFilter(&s); err != nil {
		return nil, settingError{"type", fmt.Errorf("source %s: type: %w", s.Name, err)}
	}
	if sch, ok := providers.Lookup(s.Provider); ok && sch.Defaults().GuardByType {
		src.guardType = src.guardBody && src.acceptTypes
	}
	src.checkJSON = keyer.ReadsJSON() || src.schema != nil ||
		src.orderObject != nil && (src.orderObject.ReadsJSON() || src.orderTime.ReadsJSON()) ||
		src.typeField != nil && src.typeField.ReadsJSON()
	return src, nil
}

// SourceError is Compile's error for the source at Index of the list, and
// the setting that failed ("schema_file", "key", "secrets", "order", "type"),
// so that `oncehook validate` can name its line. Its message is the
// source's own.
type SourceError struct {
	Index   int
	Setting string
	Err     error
}

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// settingError marks which setting of a source failed to compile.
type settingError struct {
	setting string
	err     error
}

func (e settingError) Error() string { return e.err.Error() }
func (e settingError) Unwrap() error { return e.err }

// compileVerifier builds the source's verifier from its provider and
// VerifierOptions (the options config.Validate tries). A keys_url source
// without secrets gets noKeysYet.
func compileVerifier(s *config.Source) (providers.Verifier, error) {
	scheme, ok := providers.Lookup(s.Provider)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", s.Provider)
	}
	if len(s.Secrets) == 0 && s.KeysURL != "" {
		return noKeysYet{}, nil
	}
	// Provider errors say why a secret is unusable, never quoting it.
	v, err := scheme.NewVerifier(s.VerifierOptions())
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	return v, nil
}

// errNoKeysYet refuses a keys_url source's deliveries before its key set
// has given it a verifier.
var errNoKeysYet = fmt.Errorf("%w: no keys yet (keys_url)", providers.ErrBadSignature)

// noKeysYet is the verifier of a keys_url source without static secrets
// until its key set replaces it: every delivery is 401.
type noKeysYet struct{}

func (noKeysYet) Verify(*providers.Request) error { return errNoKeysYet }

// compileOrder reads the ordering guard's fields; nil o: no guard.
func (src *Source) compileOrder(o *config.Order) error {
	if o == nil {
		return nil
	}
	var err error
	if src.orderObject, err = providers.NewField(o.Object); err != nil {
		return fmt.Errorf("order.object: %w", err)
	}
	if src.orderTime, err = providers.NewField(o.Time); err != nil {
		return fmt.Errorf("order.time: %w", err)
	}
	src.orderUnordered = o.Missing == config.OrderMissingUnordered
	return nil
}

// compileTypeFilter reads the type field and the listed types when the
// source filters by type (accept_types or drop_types).
func (src *Source) compileTypeFilter(s *config.Source) error {
	if len(s.AcceptTypes) == 0 && len(s.DropTypes) == 0 {
		return nil
	}
	var err error
	if src.typeField, err = providers.NewTextField(s.Type); err != nil {
		return err
	}
	list := s.DropTypes
	if src.acceptTypes = len(s.AcceptTypes) > 0; src.acceptTypes {
		list = s.AcceptTypes
	}
	src.types = make(map[string]struct{}, len(list))
	for _, t := range list {
		src.types[t] = struct{}{}
	}
	return nil
}

// noMetrics counts nothing: Options.Metrics left nil.
type noMetrics struct{}

func (noMetrics) Request(string, int)             {}
func (noMetrics) Claim(string, bool)              {}
func (noMetrics) SignatureFailure(string, string) {}
func (noMetrics) ClaimDuration(time.Duration)     {}
func (noMetrics) ReplaySuspected(string)          {}
func (noMetrics) SyncConflict(string)             {}
func (noMetrics) DuplicateBodyChanged(string)     {}
func (noMetrics) Filtered(string, string)         {}
func (noMetrics) SchemaFailure(string)            {}

// uniqueNames drops the repeats of a header name in names, ignoring case
// (HTTP's), keeping the first: a name listed twice in forward_headers would
// otherwise store, and send the handler, the provider's header twice.
func uniqueNames(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, n) }) {
			out = append(out, n)
		}
	}
	return out
}
