package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"oncehook/admin"
	"oncehook/engine"
)

// TestEventListPagesReachEveryEvent walks /v1/events page by page, with and
// without a state filter, and checks that "next" visits every event exactly
// once; a dry-run replay by state must see past the engine's page size too.
func TestEventListPagesReachEveryEvent(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	const total = engine.MaxListLimit + 205
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("evt_page_%04d", i)
				body := orderBody(id, "obj_"+id, 1)
				if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
					t.Errorf("post %s: %d %s", id, a.Status, a.Raw)
				}
			}
		}()
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	waitUntil(t, "every event done", func() bool {
		byState, _, err := tn.n.cluster.Counts()
		return err == nil && byState[engine.StateDone] == total
	})

	type page struct {
		Events []admin.Event `json:"events"`
		Next   string        `json:"next"`
	}
	walk := func(query url.Values) int {
		t.Helper()
		seen := map[string]bool{}
		after := ""
		for pages := 0; ; pages++ {
			if pages > total {
				t.Fatalf("%v: pagination does not end", query)
			}
			q := url.Values{}
			for k, v := range query {
				q[k] = v
			}
			if after != "" {
				q.Set("after", after)
			}
			var p page
			if st := tn.adminGet("/v1/events?"+q.Encode(), &p); st != http.StatusOK {
				t.Fatalf("%v: status %d", q, st)
			}
			for _, ev := range p.Events {
				if seen[ev.Key] {
					t.Fatalf("%v: %s listed twice", q, ev.Key)
				}
				seen[ev.Key] = true
			}
			if p.Next == "" {
				return len(seen)
			}
			after = p.Next
		}
	}
	cases := []url.Values{
		{"limit": {"500"}},
		{"limit": {"500"}, "state": {"done"}},
		{"limit": {"333"}, "state": {"done"}, "source": {"orders"}},
		// Over the engine's largest page: served as pages of that size, with
		// "next" (once it was capped silently and the rest unreachable).
		{"limit": {"5000"}},
		{"limit": {"5000"}, "state": {"done"}},
	}
	for _, q := range cases {
		if got := walk(q); got != total {
			t.Errorf("%v: walked %d events, want %d", q, got, total)
		}
	}
	if st := tn.adminGet("/v1/events?state=done&after=not-a-cursor", nil); st != http.StatusBadRequest {
		t.Errorf("malformed cursor: status %d, want 400", st)
	}

	req, _ := http.NewRequest(http.MethodPost, tn.admin+"/v1/replay",
		bytes.NewReader([]byte(`{"state":"done","reason":"count","dry_run":true}`)))
	req.Header.Set("Authorization", "Bearer "+tn.token)
	a := tn.do(req)
	if a.Status != http.StatusOK {
		t.Fatalf("dry-run replay: %d %s", a.Status, a.Raw)
	}
	if n, _ := a.Body["would_replay"].(float64); int(n) != total {
		t.Fatalf("dry-run replay would move %v events, want %d", a.Body["would_replay"], total)
	}
}
