package config

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"oncehook/providers"
)

// minSharedKey is the shortest shared key not warned about: 16 random bytes
// (128 bits) are out of reach of an offline search, while a short or
// word-like secret can be found from one captured delivery by trying
// candidates against its signature. Providers generate 24 bytes or more
// (Standard Webhooks 24-64, Stripe 32).
const minSharedKey = 16

// secretKeyName is the config key a source's secrets were given under.
func secretKeyName(i int, s *Source) string {
	if len(s.SecretFiles) > 0 {
		return sourceKey(i, "secret_files")
	}
	return sourceKey(i, "secrets")
}

// weakSecrets warns of a shared secret shorter than minSharedKey, of a
// secret listed twice in one source, and of one source's secret used by
// another: a delivery signed for one source then verifies at the other's
// URL, and a captured delivery can be replayed there as a new event.
func weakSecrets(c *Config) []string {
	type seen struct {
		source int
		key    []byte
	}
	var w []string
	var earlier []seen
	for i := range c.Sources {
		s := &c.Sources[i]
		for j, sec := range s.Secrets {
			key, ok := providers.SharedKey(s.Provider, sec)
			if !ok || len(key) == 0 {
				continue
			}
			name := secretKeyName(i, s) + "[" + strconv.Itoa(j) + "]"
			if len(key) < minSharedKey {
				w = append(w, fmt.Sprintf("%s: the key is %d bytes: a secret this short can be guessed offline from one signed delivery; use the provider's generated secret or at least 32 random bytes (openssl rand -hex 32)",
					name, len(key)))
			}
			for _, e := range earlier {
				if !bytes.Equal(e.key, key) {
					continue
				}
				if e.source == i {
					w = append(w, fmt.Sprintf("%s: the same secret is listed twice in this source (a rotation that kept the old secret instead of adding the new one?)", name))
				} else {
					w = append(w, fmt.Sprintf("%s: the same secret as source %q: a delivery signed for either source verifies at both URLs, so one captured there can be replayed here as a new event; give each source its own secret",
						name, c.Sources[e.source].Name))
				}
				break
			}
			earlier = append(earlier, seen{i, key})
		}
	}
	return w
}

// unsignedKeys warns of a key of the operator's that reads data the
// provider does not sign (a header the sender writes, where the scheme
// signs an id or the body): a captured delivery resent with another value
// there verifies as a new event. Unless replay_guard is set, such a source
// gets the replay guard (applyProviderDefaults); with replay_guard = "off"
// the replay would be delivered again.
func unsignedKeys(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		sch, ok := providers.Lookup(s.Provider)
		if !ok || s.Provider == "hmac" && s.HMAC == nil {
			continue
		}
		// Where the provider signs no id, the guard is on by default and
		// its keys are unsigned by nature (docs/security.md): nothing new,
		// unless the file turned the guard off.
		signsID := s.HMAC != nil && s.HMAC.IDHeader != "" && strings.Contains(s.HMAC.Template, "{id}")
		guardedByDefault := sch.Defaults().ReplayGuard && !signsID
		if guardedByDefault && s.ReplayGuard != ReplayGuardOff {
			continue
		}
		j := unsignedKeyPart(s)
		if j < 0 {
			continue
		}
		// keyPartChangesPerDelivery warns of a per-delivery header; with
		// the guard off that says all, with it on the operator learns of
		// the guard here.
		if !guardedByDefault && (defaultKeyUnsigned(s.Provider, sch.Defaults().Key) || perDeliveryPart(s, s.Key[j]) && s.ReplayGuard == ReplayGuardOff) {
			continue
		}
		then := "the replay guard is on for this source (a body seen before under another key is a duplicate)"
		switch {
		case guardedByDefault:
			// The scheme signs no id: only the guard tells a replay from
			// a new event, and the file turned it off.
			then = fmt.Sprintf("%s signs no event id, so only the replay guard catches such a replay, and with replay_guard = \"off\" it is delivered again: turn the guard on unless the sender sends one body as several events", s.Provider)
		case s.ReplayGuard == ReplayGuardOff:
			then = "with replay_guard = \"off\" such a replay is delivered again: key on the id the provider signs, or turn the guard on"
		}
		w = append(w, fmt.Sprintf("%s: %s is not covered by %s's signature: a captured delivery resent with another value there verifies as a new event; %s",
			sourceKey(i, "key")+"["+strconv.Itoa(j)+"]", s.Key[j], s.Provider, then))
	}
	return w
}

// unguardedUnsignedKeys warns about a shopify source whose key shopify does
// not sign and whose replay guard is off because that is shopify's default
// (it sends several topics with one body, which the guard would take for
// one event). A captured delivery resent under a new id there is a
// new event; the operator decides, and setting replay_guard either way
// silences this.
func unguardedUnsignedKeys(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.Provider != "shopify" || s.ReplayGuard != ReplayGuardOff || c.lines.has(sourceKey(i, "replay_guard")) {
			continue
		}
		j := unsignedKeyPart(s)
		if j < 0 {
			continue
		}
		w = append(w, fmt.Sprintf("%s: %s's signature covers the body, not %s, and the replay guard is off by default for %s: "+
			"a captured delivery resent with a new value there is a new event, delivered again; "+
			"set replay_guard = \"body\" if the source subscribes to one topic or lists its topics in accept_types (the guard then keeps each listed topic's delivery apart; docs/security.md), or replay_guard = \"off\" to keep it off without this warning",
			sourceKey(i, "replay_guard"), s.Provider, s.Key[j], s.Provider))
	}
	return w
}

// pathLike matches a value made of a path's characters alone, starting as
// one and naming at least two levels: what a path copied inline looks like,
// and what a random secret rarely is (base64 of random bytes has '+' or a
// '=' pad, or no second '/', nearly always).
var pathLike = regexp.MustCompile(`^(~|\.{1,2})?/([A-Za-z0-9_-]*\.[A-Za-z0-9._/-]*|[A-Za-z0-9._-]+/[A-Za-z0-9._/-]*)$`)

// inlinePaths warns of an inline secret or admin token that reads as a
// path to a file that does not exist here, or that starts with '$' as a
// shell variable does (Load refuses what is one beyond doubt): an inline
// value is the secret as written, never read from a file nor expanded.
func inlinePaths(c *Config) []string {
	looks := func(v Secret) string {
		switch {
		case pathLike.MatchString(string(v)):
			return "reads like a file's path"
		case strings.HasPrefix(string(v), "$"):
			return "starts with $, as a shell variable does"
		}
		return ""
	}
	const why = ": %s, and an inline value is the secret as written, never read from a file nor expanded; if it is a reference, put the file's path in %s"
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		if len(s.SecretFiles) > 0 {
			continue
		}
		for j, v := range s.Secrets {
			if l := looks(v); l != "" {
				w = append(w, fmt.Sprintf(sourceKey(i, "secrets")+"[%d]"+why, j, l, "secret_files"))
			}
		}
	}
	for i, t := range c.Admin.Tokens {
		if l := looks(t.Token); t.TokenFile == "" && l != "" {
			w = append(w, fmt.Sprintf("admin.tokens[%d].token"+why, i, l, "token_file"))
		}
	}
	return w
}
