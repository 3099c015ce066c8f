package main

import (
	"fmt"
	"testing"
	"time"

	"oncehook/providers"
)

const filterSources = `
[[source]]
name = "stripe-f"
provider = "stripe"
secrets = ["whsec_stripe_test_secret"]
forward = "%[1]s/stripe-f"
drop_types = ["charge.updated", "commande.créée"]

[[source]]
name = "gh-f"
provider = "github"
secrets = ["` + githubTestSecret + `"]
forward = "%[1]s/gh-f"
accept_types = ["push", "événement"]
`

// TestTypeFilters: a verified delivery whose type the source's filter drops
// is answered 200 filtered, never stored nor delivered, and counted; the
// others are claimed as usual; a bad signature is 401 whatever the type.
func TestTypeFilters(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, filterSources)

	sign := func(provider, secret string, body []byte, id string) []providers.Header {
		s, _ := providers.Lookup(provider)
		hs, err := s.Sign(body, []byte(secret), time.Now(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	stripe := func(id, typ, secret string) ([]byte, []providers.Header) {
		body := []byte(fmt.Sprintf(`{"id":%q,"type":%q,"data":{}}`, id, typ))
		if typ == "" {
			body = []byte(fmt.Sprintf(`{"id":%q,"data":{}}`, id))
		}
		return body, sign("stripe", secret, body, "")
	}
	github := func(id, event, secret string) ([]byte, []providers.Header) {
		body := []byte(fmt.Sprintf(`{"delivery":%q}`, id)) // distinct bodies: the replay guard is on
		hs := sign("github", secret, body, id)
		if event != "" {
			hs = withHeader(hs, "X-GitHub-Event", event)
		}
		return body, hs
	}
	const stripeSecret, wrong = "whsec_stripe_test_secret", "whsec_d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA=="

	cases := []struct {
		name    string
		source  string
		id      string
		request func() ([]byte, []providers.Header)
		status  int
		answer  string // "filtered", "accepted" or "error"
		typ     any    // the filtered answer's "type"; nil: absent
	}{
		{"stripe dropped type", "stripe-f", "evt_drop", func() ([]byte, []providers.Header) { return stripe("evt_drop", "charge.updated", stripeSecret) }, 200, "filtered", "charge.updated"},
		{"stripe dropped type, not ASCII", "stripe-f", "evt_drop_fr", func() ([]byte, []providers.Header) {
			return stripe("evt_drop_fr", "commande.créée", stripeSecret)
		}, 200, "filtered", "commande.créée"},
		{"stripe other type", "stripe-f", "evt_keep", func() ([]byte, []providers.Header) { return stripe("evt_keep", "charge.succeeded", stripeSecret) }, 202, "accepted", nil},
		{"stripe no type is not dropped", "stripe-f", "evt_untyped", func() ([]byte, []providers.Header) { return stripe("evt_untyped", "", stripeSecret) }, 202, "accepted", nil},
		{"stripe dropped type, bad signature", "stripe-f", "evt_forged", func() ([]byte, []providers.Header) { return stripe("evt_forged", "charge.updated", wrong) }, 401, "error", nil},
		{"github not accepted", "gh-f", "d-issues", func() ([]byte, []providers.Header) { return github("d-issues", "issues", githubTestSecret) }, 200, "filtered", "issues"},
		{"github accepted", "gh-f", "d-push", func() ([]byte, []providers.Header) { return github("d-push", "push", githubTestSecret) }, 202, "accepted", nil},
		{"github accepted, not ASCII", "gh-f", "d-fr", func() ([]byte, []providers.Header) { return github("d-fr", "événement", githubTestSecret) }, 202, "accepted", nil},
		{"github no type is not accepted", "gh-f", "d-none", func() ([]byte, []providers.Header) { return github("d-none", "", githubTestSecret) }, 200, "filtered", nil},
		{"github not accepted, bad signature", "gh-f", "d-forged", func() ([]byte, []providers.Header) { return github("d-forged", "issues", wrong) }, 401, "error", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, hs := c.request()
			a := tn.post(c.source, body, hs)
			if a.Status != c.status || a.Body["status"] != c.answer {
				t.Fatalf("%d %s, want %d %s", a.Status, a.Raw, c.status, c.answer)
			}
			key := c.source + ":" + c.id
			if c.answer == "filtered" {
				if typ, ok := a.Body["type"]; typ != c.typ || ok != (c.typ != nil) {
					t.Errorf("answer %s: type %v, want %v", a.Raw, typ, c.typ)
				}
			}
			_, err := tn.event(key)
			if stored := err == nil; stored != (c.answer == "accepted") {
				t.Fatalf("%s stored = %v (%v)", key, stored, err)
			}
			if c.answer == "accepted" {
				waitUntil(t, key+" delivered", func() bool { return len(h.deliveries(key)) == 1 })
			}
		})
	}

	// Every accepted event is delivered by now; the forwarder is idle, so
	// nothing filtered is on its way either.
	waitUntil(t, "deliveries", func() bool { return len(h.deliveries("")) == 4 })
	for _, c := range cases {
		if n := len(h.deliveries(c.source + ":" + c.id)); c.answer != "accepted" && n != 0 {
			t.Errorf("%s: %d deliveries of a %s delivery", c.name, n, c.answer)
		}
	}
	text := tn.scrape()
	for series, want := range map[string]float64{
		`oncehook_filtered_total{source="stripe-f",type="charge.updated"}`: 1,
		`oncehook_filtered_total{source="stripe-f",type="commande.créée"}`: 1,
		`oncehook_filtered_total{source="gh-f",type="other"}`:              2,
		`oncehook_claims_total{result="new",source="stripe-f"}`:            2,
		`oncehook_claims_total{result="new",source="gh-f"}`:                2,
		`oncehook_requests_total{code="200",source="stripe-f"}`:            2,
		`oncehook_requests_total{code="401",source="gh-f"}`:                1,
	} {
		if got := mustMetric(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{
		`oncehook_claims_total{result="duplicate",source="stripe-f"}`,
		`oncehook_claims_total{result="duplicate",source="gh-f"}`,
	} {
		// Exported at 0 from the start for a configured source.
		if v, ok := metricValue(text, series); !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0: a filtered delivery was claimed", series, v, ok)
		}
	}
}
