package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// A follower running a newer binary relays a batch with a field its leader
// does not know: the leader refuses it with an error naming the field and its
// own format (the follower's intake answers 503 and the provider retries),
// commits nothing, and keeps serving.
func TestRelayNewerEntryRefused(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	f := c.follower(leader)
	c.waitConverged()
	before := c.nodes[leader].eng.LastApplied()

	// A claim from a newer binary: a field-mask bit above this binary's fields.
	newer := engine.EncodeRelayEntry(nil, []engine.Command{claimCmd("src:new")})
	newer = append(newer[:3:3], 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40) // bit 62 only
	if _, err := engine.DecodeEntry(newer); !errors.Is(err, engine.ErrNewerFormat) {
		t.Fatalf("test entry: %v; want ErrNewerFormat", err)
	}
	_, err := c.nodes[f].relay.call(ctxT(t, 5*time.Second), c.ids[leader], rpcApply, newer)
	want := fmt.Sprintf("entry field 62 (mask %#x) is from a newer format; this binary reads up to format %d", uint64(1)<<62, engine.FormatVersion)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("relay of a newer entry: %v; want an error naming %q", err, want)
	}
	if errors.Is(err, ErrIndeterminate) {
		t.Fatalf("relay of a newer entry: %v; the leader refused it before the log, the outcome is known", err)
	}
	if got := c.nodes[leader].eng.LastApplied(); got != before {
		t.Fatalf("leader applied %d -> %d after refusing the entry", before, got)
	}

	// The cluster keeps serving, through the same follower.
	res, err := c.nodes[f].Apply(ctxT(t, 5*time.Second), claimCmd("src:old"))
	if err != nil || res[0].Err != nil || !res[0].Created {
		t.Fatalf("claim after the refusal: %+v, %v", res, err)
	}
	c.waitConverged()
}
