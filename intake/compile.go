package intake

import (
	"fmt"
	"time"

	"oncehook/config"
	"oncehook/providers"
)

// Compile turns the config's sources into the hot path's form: the
// verifier, the key rule, the order and type fields, the schema (compiled
// once per load; a schema that does not compile fails the load) and the
// answers' settings. A keys_url source keeps its config verifier until the
// key set replaces it (Source.UseVerifier).
func Compile(sources []config.Source) (*Set, error) {
	set := &Set{byName: make(map[string]*Source, len(sources))}
	for i := range sources {
		s := &sources[i]
		keyer, err := providers.NewKeyer(s.Name, s.Key)
		if err != nil {
			return nil, fmt.Errorf("source %s: key: %w", s.Name, err)
		}
		src := &Source{
			name:       s.Name,
			provider:   s.Provider,
			verifier:   s.Verifier,
			keyer:      keyer,
			fwdHeaders: s.ForwardHeaders,
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
		if h, ok := s.Verifier.(providers.Handshaker); ok {
			src.handshaker = h
		}
		if s.SchemaFile != "" {
			// Compiled once per (re)load; a schema that does not compile
			// rejects the load and keeps the running configuration.
			if src.schema, err = compileSchema(s.SchemaFile); err != nil {
				return nil, fmt.Errorf("source %s: %w", s.Name, err)
			}
		}
		if s.Order != nil {
			if src.orderObject, err = providers.NewField(s.Order.Object); err != nil {
				return nil, fmt.Errorf("source %s: order.object: %w", s.Name, err)
			}
			if src.orderTime, err = providers.NewField(s.Order.Time); err != nil {
				return nil, fmt.Errorf("source %s: order.time: %w", s.Name, err)
			}
			src.orderUnordered = s.Order.Missing == config.OrderMissingUnordered
		}
		if len(s.AcceptTypes) > 0 || len(s.DropTypes) > 0 {
			if src.typeField, err = providers.NewField(s.Type); err != nil {
				return nil, fmt.Errorf("source %s: type: %w", s.Name, err)
			}
			list := s.DropTypes
			if src.acceptTypes = len(s.AcceptTypes) > 0; src.acceptTypes {
				list = s.AcceptTypes
			}
			src.types = make(map[string]struct{}, len(list))
			for _, t := range list {
				src.types[t] = struct{}{}
			}
		}
		src.checkJSON = keyer.ReadsJSON() || src.schema != nil ||
			src.orderObject != nil && (src.orderObject.ReadsJSON() || src.orderTime.ReadsJSON()) ||
			src.typeField != nil && src.typeField.ReadsJSON()
		if src.maxBody > set.maxBody {
			set.maxBody = src.maxBody
		}
		set.byName[s.Name] = src
	}
	return set, nil
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
