package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSendToAlternativeKeys: `oncehook send -id` reaches a node for sources
// whose default key is a choice of headers (shopify, svix, gitlab): the id
// goes in the first header named, the node claims it under that id, and a
// second send of the same id is a duplicate. For a source keyed on the
// payload (stripe) send says that -id does not make the key.
func TestSendToAlternativeKeys(t *testing.T) {
	h := newHandler(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "shop.secret"), "shpss_0123456789abcdef0123456789abcdef\n")
	mustWrite(t, filepath.Join(dir, "svix.secret"), "whsec_"+strings.Repeat("QkJC", 8)+"\n")
	mustWrite(t, filepath.Join(dir, "gitlab.secret"), "gitlab-token-0123456789abcdef\n")
	mustWrite(t, filepath.Join(dir, "stripe.secret"), "whsec_0123456789abcdef0123456789abcdef\n")
	tn := startNodeWithSources(t, dir, h.url, `
[[source]]
name = "shop"
provider = "shopify"
secret_files = ["shop.secret"]
forward = "%[1]s/shop"

[[source]]
name = "svx"
provider = "svix"
secret_files = ["svix.secret"]
forward = "%[1]s/svx"

[[source]]
name = "gl"
provider = "gitlab"
secret_files = ["gitlab.secret"]
forward = "%[1]s/gl"

[[source]]
name = "st"
provider = "stripe"
secret_files = ["stripe.secret"]
forward = "%[1]s/st"

[[source]]
name = "twj"
provider = "twilio"
twilio_body = "json"
secret_files = ["gitlab.secret"]
forward = "%[1]s/twj"
`)
	mustWrite(t, filepath.Join(dir, "event.json"), `{"id":"x","type":"order"}`)
	send := func(source, id string) (string, error) {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := run(ctx, []string{"send", "-config", tn.cfgPath, "-source", source, "-id", id,
			"-file", filepath.Join(dir, "event.json"), "-url", tn.intake + "/in/" + source}, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	const note = "-id does not make the key"
	const guardNote = `has replay_guard = "body": this body was seen before under `
	for _, source := range []string{"shop", "svx", "gl"} {
		out, err := send(source, "evt-"+source)
		if err != nil || !strings.Contains(out, "202") || !strings.Contains(out, `"key":"`+source+`:evt-`+source+`"`) || strings.Contains(out, note) {
			t.Errorf("send -source %s -id evt-%s: %v\n%s", source, source, err, out)
			continue
		}
		if out, err := send(source, "evt-"+source); err != nil || !strings.Contains(out, `"status":"duplicate"`) || strings.Contains(out, guardNote) {
			t.Errorf("second send to %s: %v\n%s", source, err, out)
		}
	}
	// A twilio source of JSON bodies: send puts the body's hash in the
	// URL's bodySHA256 and signs the URL, as Twilio does.
	if out, err := send("twj", "evt-twj"); err != nil || !strings.Contains(out, `"key":"twj:evt-twj"`) {
		t.Errorf("send -source twj: %v\n%s", err, out)
	}
	// gitlab's replay guard is on: the same body under a new -id is a
	// duplicate of the first id's event, and send says why.
	if out, err := send("gl", "evt-gl-2"); err != nil || !strings.Contains(out, `"key":"gl:evt-gl"`) || !strings.Contains(out, guardNote+"gl:evt-gl") {
		t.Errorf("send -source gl -id evt-gl-2: %v; want a duplicate of gl:evt-gl and the note %q\n%s", err, guardNote, out)
	}
	// The admin address given for the intake's: the 401 asks for a bearer
	// token, and send says which listener that is.
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"send", "-config", tn.cfgPath, "-source", "gl", "-id", "evt-gl-3",
		"-file", filepath.Join(dir, "event.json"), "-url", tn.admin + "/in/gl"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "is the admin listener, not the intake") {
		t.Errorf("send to the admin listener: %v, want it named\n%s", err, out.String())
	}
	// The key is the file's "id": a second -id is the same event, and send
	// says why.
	for i, id := range []string{"one", "two"} {
		out, err := send("st", id)
		want := `"key":"st:x"`
		if i == 1 {
			want = `"status":"duplicate"`
		}
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, note) {
			t.Errorf("send -source st -id %s: %v; want %s and the note %q\n%s", id, err, want, note, out)
		}
	}
}
