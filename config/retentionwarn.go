package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"oncehook/providers"
)

// Warnings about how long a source keeps its keys (docs/sources.md, "Providers",
// providers/SCHEMES.md "Retention and retry windows"): a key that ends
// before the sender stops resending, and a key that changes on every resend,
// both let one event in twice.

// retentionBelowRetryWindow warns when a source's retention ends before its
// provider's documented retry window: a retry after that is a new event.
func retentionBelowRetryWindow(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		sch, ok := providers.Lookup(s.Provider)
		if !ok {
			continue
		}
		if window := sch.Defaults().RetryWindow; time.Duration(s.Retention) < window {
			w = append(w, fmt.Sprintf(
				"%s: %s is shorter than %s's documented retry window of %s: a resend after the key expired is claimed and delivered again; set at least %s",
				sourceKey(i, "retention"), s.Retention, s.Provider, Duration(window), Duration(window+providers.RetryMargin)))
		}
	}
	return w
}

// retentionBelowTolerance warns when an hmac source that signs a timestamp
// forgets its keys sooner than twice its tolerance: a delivery stamped up to
// tolerance ahead verifies until tolerance after its stamp, so a resend of
// it (or a captured copy) may still verify once the key is gone, and is
// claimed again. The providers' own schemes have a retry window, warned of
// above.
func retentionBelowTolerance(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.HMAC == nil || !strings.Contains(s.HMAC.Template, "{timestamp}") || s.Tolerance <= 0 {
			continue
		}
		if need := 2 * time.Duration(s.Tolerance); time.Duration(s.Retention) < need {
			w = append(w, fmt.Sprintf(
				"%s: %s is shorter than twice tolerance %s: a delivery still inside its signed time's tolerance after its key expired is claimed and delivered again; set at least %s",
				sourceKey(i, "retention"), s.Retention, s.Tolerance, Duration(need)))
		}
	}
	return w
}

// retriesOutliveRetention warns when the handler's retry schedule can run
// past the key's retention: max_attempts attempts wait up to backoff_max
// before each retry, max_attempts-1 waits in all (one attempt never waits).
// No key is lost then (expiry moves an unfinished event to a later bucket),
// but the store keeps more than retention says.
func retriesOutliveRetention(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		retries := s.MaxAttempts - 1
		if retries <= 0 || s.Retention <= 0 || s.BackoffMax <= 0 {
			continue
		}
		schedule := time.Duration(s.BackoffMax) * time.Duration(retries)
		if schedule/time.Duration(retries) != time.Duration(s.BackoffMax) || schedule > time.Duration(s.Retention) {
			w = append(w, fmt.Sprintf(
				"%s: max_attempts %d waits up to backoff_max %s before each of %d retries, beyond retention %s: an event still retrying is kept past its retention (an unfinished key never expires), so retention no longer bounds what the store keeps; raise retention or lower max_attempts or backoff_max",
				sourceKey(i, "max_attempts"), s.MaxAttempts, s.BackoffMax, retries, s.Retention))
		}
	}
	return w
}

// perDeliveryHeaders are headers whose value changes on every delivery of
// one event (signatures and signing timestamps), or that carry the secret
// itself: as a key part, each resend would be a new key.
var perDeliveryHeaders = []string{
	"Stripe-Signature",
	"X-Hub-Signature", "X-Hub-Signature-256",
	"X-Shopify-Hmac-Sha256",
	"webhook-signature", "webhook-timestamp",
	"svix-signature", "svix-timestamp",
	"X-Slack-Signature", "X-Slack-Request-Timestamp",
	"X-Gitlab-Token",
	"Paddle-Signature",
	"X-Twilio-Signature",
	"Linear-Signature",
	"x-zm-signature", "x-zm-request-timestamp",
	"asaas-access-token",
}

// keyPartChangesPerDelivery warns when a key part reads a signature,
// timestamp or token header (perDeliveryHeaders, and an hmac source's own
// signature and timestamp headers).
func keyPartChangesPerDelivery(c *Config) []string {
	var w []string
	for i := range c.Sources {
		s := &c.Sources[i]
		bad := perDeliveryNames(s)
		for j, part := range s.Key {
			for _, alt := range strings.Split(part, "|") {
				kind, name, _ := strings.Cut(strings.TrimSpace(alt), ":")
				if kind != "header" || !containsFold(bad, name) || readsSecret(s, name) {
					continue
				}
				off := ""
				if s.ReplayGuard == ReplayGuardOff {
					// A key on a signed timestamp leaves the guard off (it
					// is not the sender's to write): nothing else catches
					// the provider's resends then.
					off = "; the replay guard is off for this source, so nothing else catches such a resend"
				}
				w = append(w, fmt.Sprintf(
					"%s: header:%s is a signature, timestamp or token header: its value changes on every delivery (or is the secret), so every resend would be a new event; key on the event's id%s",
					sourceKey(i, "key")+"["+strconv.Itoa(j)+"]", name, off))
			}
		}
	}
	return w
}

// readsSecret: header name carries s's secret, a reading refused as an
// error (sourceCheck.secretReads) rather than warned of.
func readsSecret(s *Source, name string) bool {
	sch, ok := providers.Lookup(s.Provider)
	return ok && sch.Defaults().SecretHeader != "" && strings.EqualFold(sch.Defaults().SecretHeader, name)
}

func sourceKey(i int, name string) string { return "source[" + strconv.Itoa(i) + "]." + name }

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if v != "" && strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// perDeliveryNames are the headers whose values change on every delivery
// of s: perDeliveryHeaders, and an hmac source's own signature and
// timestamp headers.
func perDeliveryNames(s *Source) []string {
	if s.HMAC == nil {
		return perDeliveryHeaders
	}
	return append(append([]string(nil), perDeliveryHeaders...), s.HMAC.Header, s.HMAC.TimestampHeader)
}

// perDeliveryPart reports whether a key part reads such a header (warned of
// by keyPartChangesPerDelivery).
func perDeliveryPart(s *Source, part string) bool {
	bad := perDeliveryNames(s)
	for _, alt := range strings.Split(part, "|") {
		if kind, name, _ := strings.Cut(strings.TrimSpace(alt), ":"); kind == "header" && containsFold(bad, name) {
			return true
		}
	}
	return false
}
