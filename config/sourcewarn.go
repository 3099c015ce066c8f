package config

import (
	"fmt"
	"time"
)

// retryPoll is how often the leader looks for events whose retry is due
// (forward.DefaultPollInterval): a backoff shorter than it is rounded up to
// the next look, as far as the handler can tell.
const retryPoll = time.Second

// maxSaneTolerance is the widest timestamp tolerance not warned about: the
// providers that sign a time resend within minutes, and a tolerance of days
// accepts a captured delivery for that long (docs/security.md).
const maxSaneTolerance = time.Hour

// subSecondBackoff warns that retries are looked for once a second: a
// backoff under a second does not make a retry come sooner than the next
// look, and the log's retry_in is not when it happens.
func subSecondBackoff(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		for _, b := range []struct {
			key string
			d   Duration
		}{{"backoff_min", s.BackoffMin}, {"backoff_max", s.BackoffMax}} {
			if b.d > 0 && time.Duration(b.d) < retryPoll {
				w = append(w, fmt.Sprintf("%s: %s is under a second, but due retries are looked for once a second: a retry may come up to 1s later than its backoff",
					sourceKey(i, b.key), b.d))
			}
		}
	}
	return w
}

// wideTolerance warns about a timestamp tolerance over an hour: a signed
// time is what stops a captured delivery from verifying later, and a wide
// tolerance keeps it verifying for that long.
func wideTolerance(c *Config) []string {
	var w []string
	for i := range c.Sources {
		if t := time.Duration(c.Sources[i].Tolerance); t > maxSaneTolerance {
			w = append(w, fmt.Sprintf("%s: %s lets a captured delivery verify for that long after it was signed (and as far ahead); providers resend within minutes: keep it at most %s",
				sourceKey(i, "tolerance"), c.Sources[i].Tolerance, Duration(maxSaneTolerance)))
		}
	}
	return w
}

// deadRetentionBelowRetention warns that a dead_retention shorter than the
// source's retention is not used: a dead letter is kept at least as long as
// its key.
func deadRetentionBelowRetention(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.DeadRetention > 0 && s.Retention > 0 && s.DeadRetention < s.Retention {
			w = append(w, fmt.Sprintf("%s: %s is shorter than retention %s: a dead letter is kept at least as long as its key, so retention applies",
				sourceKey(i, "dead_retention"), s.DeadRetention, s.Retention))
		}
	}
	return w
}

// largeBodyWarn is the max_body above which a cluster's config is warned
// about: a claim's body is copied whole several times on every node, about
// 65 ms of CPU per MiB across three nodes on the reference machine, and at
// 60 MiB the leader can miss its lease (docs/architecture.md, "Large
// bodies"). A single node does none of the replication.
const largeBodyWarn = 16 * MiB

// largeBodies warns of a max_body in the tens of megabytes on a cluster.
func largeBodies(c *Config) []string {
	if c.Cluster == nil || len(c.Cluster.Peers) < 2 {
		return nil
	}
	var w []string
	for i := range c.Sources {
		if b := c.Sources[i].MaxBody; b > largeBodyWarn {
			w = append(w, fmt.Sprintf("%s: %s lets one claim carry that much to every node (about 65 ms of CPU per MiB across three nodes, and at tens of MiB a leader change now and then, docs/architecture.md \"Large bodies\"): set it near the largest body the provider sends",
				sourceKey(i, "max_body"), b))
		}
	}
	return w
}

// smallBodyWarn: below it a max_body refuses ordinary deliveries; the
// providers' events are kilobytes (a Stripe event is rarely under 1 KiB).
const smallBodyWarn = 1 * KiB

// smallBodies warns of a max_body too small for the provider's deliveries:
// each is answered 413, and the provider retries it until it gives up.
func smallBodies(c *Config) []string {
	var w []string
	for i := range c.Sources {
		if b := c.Sources[i].MaxBody; b > 0 && b < smallBodyWarn {
			w = append(w, fmt.Sprintf("%s: %s refuses (413) every larger delivery, and providers' events are kilobytes: the provider retries each until it gives up; set it near the largest body the provider sends",
				sourceKey(i, "max_body"), b))
		}
	}
	return w
}

// ineffectiveKeys warns of a key the file sets to a value that does nothing
// for its source (the default written out, as in config.example.toml, is
// not warned about): an operator who set it expects what it does elsewhere.
func ineffectiveKeys(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		has := func(key string) bool { return c.lines.has(sourceKey(i, key)) }
		if len(s.TrustedProxies) > 0 && s.Provider != "twilio" {
			w = append(w, sourceKey(i, "trusted_proxies")+": read for twilio sources only (the URL they sign, behind a proxy): it has no effect on a "+s.Provider+" source")
		}
		if s.MaxRateBurst > 0 && s.MaxRate <= 0 {
			w = append(w, sourceKey(i, "max_rate_burst")+": has no effect without max_rate")
		}
		if has("ack_status") && s.Mode == "sync" {
			w = append(w, sourceKey(i, "ack_status")+": a sync source answers with its handler's status: ack_status has no effect")
		}
	}
	return w
}
