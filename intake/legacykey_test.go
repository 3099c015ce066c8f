package intake

import (
	"path/filepath"
	"strings"
	"testing"

	"oncehook/engine"
	"oncehook/providers"
)

// TestCompositeKeyFindsItsLegacyForm: an event claimed before composite
// keys escaped ':' and '%' (its key joins the parts as they were) is found
// by a resend of the same body after the upgrade: a duplicate, not a second
// delivery. Another event whose parts join the same way is a new event.
func TestCompositeKeyFindsItsLegacyForm(t *testing.T) {
	dir := t.TempDir()
	secret, err := providers.GenerateSecret("standard")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	store := newMemStore(t)
	in := New(Options{Store: store, Sources: loadSources(t, dir, `
[[source]]
name = "comp"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/comp"
key = ["json:a", "json:b"]
`)})
	f := &intakeFixture{t: t, in: in, store: store, secret: secret}

	// What the earlier binary stored for {"a":"x:y","b":"z"}.
	first := `{"a":"x:y","b":"z"}`
	if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: "comp:x:y:z", Source: "comp", Payload: []byte(first)}); err != nil {
		t.Fatal(err)
	}
	before := store.index

	a := f.do(request{path: "/in/comp", body: first, id: "msg_resend"})
	if a.status != 200 || !strings.Contains(a.body, `"status":"duplicate","key":"comp:x:y:z"`) {
		t.Fatalf("resend of the event claimed under the legacy key: %d %s, want 200 duplicate of comp:x:y:z", a.status, a.body)
	}
	if store.index != before {
		t.Fatal("the resend was claimed again")
	}
	store.mu.Lock()
	store.notCurrent = true
	store.mu.Unlock()
	a = f.do(request{path: "/in/comp", body: first, id: "msg_resend2"})
	if store.index == before {
		t.Fatalf("resend to a node not current: %d %s answered from its own state, want the claim to decide", a.status, a.body)
	}
	store.mu.Lock()
	store.notCurrent = false
	store.mu.Unlock()
	// Another event whose parts joined the same way: its own key.
	other := `{"a":"x","b":"y:z"}`
	a = f.do(request{path: "/in/comp", body: other, id: "msg_other"})
	if a.status != 202 || !strings.Contains(a.body, `"key":"comp:x:y%3Az"`) {
		t.Fatalf("another event: %d %s, want 202 under comp:x:y%%3Az", a.status, a.body)
	}
}
