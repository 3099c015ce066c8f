package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// sampleCommands covers every field of Command with non-zero values.
func sampleCommands() []Command {
	return []Command{
		{Op: OpClaim, Now: t0, Key: "stripe-live:evt_1", Source: "stripe-live", Payload: []byte(`{"id":"evt_1"}`),
			Headers:   []Header{{Name: "Stripe-Signature", Value: "t=1,v1=ab"}, {Name: "Content-Type", Value: "application/json"}},
			Retention: 168 * hour, OrderObject: "pi_1", OrderTime: -5, LeaseFor: 30 * sec, BodyKey: "stripe-live\x00\xff\x01"},
		{Op: OpClaim, Now: t0, Key: "s:k", Source: "s", LeaseNow: 30 * sec},
		{Op: OpLease, Now: t0 + 1, Max: 64, LeaseFor: 30 * sec},
		{Op: OpLease, Now: t0 + 1, Max: 64, LeaseFor: 30 * sec, Share: 32, Spare: 8,
			Quotas: []Quota{{Source: "github", Max: 3}, {Source: "shopify", Hard: true}, {Source: "stripe-live", Max: 1 << 20, Hard: true}}},
		{Op: OpLease, Now: t0 + 1, Max: 8, LeaseFor: 30 * sec, Leases: []LeaseLength{{Source: "github", For: 120 * sec}, {Source: "shopify", For: 1}}},
		{Op: OpComplete, Now: t0 + 2, Key: "k", Token: 12345, Response: &Response{Status: 201, Body: []byte("ok")}, Step: "shipped"},
		{Op: OpComplete, Now: t0 + 2, Key: "k", Token: 1, Response: &Response{}},
		{Op: OpComplete, Now: t0 + 2, Key: "k", Token: 2, Response: &Response{Status: 200, Body: []byte(`{"text":"hi"}`), ContentType: "application/json"}},
		{Op: OpComplete, Now: t0 + 2, Key: "k", Token: 3, Response: &Response{ContentType: "text/xml"}},
		{Op: OpFail, Now: t0 + 3, Key: "k", Token: 9, RetryIn: 4 * sec, MaxAttempts: 8, Reason: "timeout", Step: "charged",
			Attempt: &Attempt{At: t0 + 2, Took: 1500, Status: 502, Error: "status 502", Body: []byte("bad gateway")}},
		{Op: OpFail, Now: t0 + 3, Key: "k", Token: 9, Attempt: &Attempt{}},
		{Op: OpFail, Now: t0 + 3, Key: "k", Token: 9, RetryIn: 2 * sec, MaxAttempts: 3, Reason: "rate limited", Refund: true},
		{Op: OpComplete, Now: t0 + 2, Key: "k", Token: 3, PayloadRetention: 72 * hour},
		{Op: OpFail, Now: t0 + 3, Key: "k", Token: 9, MaxAttempts: 1, DeadRetention: 720 * hour,
			Attempt: &Attempt{At: t0 + 2, Status: 500}},
		{Op: OpReclaim, Now: t0 + 4},
		{Op: OpReclaim, Now: t0 + 4, Horizon: 10 * 60 * sec},
		{Op: OpReplay, Now: t0 + 5, Keys: []string{"k"}, OnlyFrom: StateDead, Who: "provider", Reason: "provider retry"},
		{Op: OpPurge, Now: t0 + 4, State: StateDead, Source: "s", Before: t0, Max: 1000, Who: "ops", Reason: "gdpr"},
		{Op: OpReplay, Now: t0 + 5, Keys: []string{"a", "b", ""}, Who: "ops", Reason: "fixed"},
		{Op: OpReplay, Now: t0 + 5, State: StateDead, Source: "s", Since: -1},
		{Op: OpExpire, Now: t0 + 6},
		{Op: OpDropPayloads, Now: t0 + 7, Before: t0},
		{Op: OpNoop},
		{Op: OpPause, Now: t0 + 8, Source: "stripe-live", Who: "ops", Reason: "handler down"},
		{Op: OpResume, Now: t0 + 9, Source: "stripe-live", Who: "ops", Reason: "fixed"},
		{Op: 0, Max: -3, MaxAttempts: -1}, // op 0 decodes; Apply rejects it
	}
}

func TestEntryRoundTrip(t *testing.T) {
	tests := [][]Command{nil, {}, sampleCommands(), sampleCommands()[:1], {{Op: OpNoop}}}
	for i, cmds := range tests {
		b := EncodeEntry([]byte("prefix"), cmds)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("%d: EncodeEntry did not append to dst", i)
		}
		got, err := DecodeEntry(b[len("prefix"):])
		if err != nil {
			t.Fatalf("%d: DecodeEntry: %v", i, err)
		}
		if len(cmds) == 0 {
			if len(got) != 0 {
				t.Fatalf("%d: decoded %d commands", i, len(got))
			}
			continue
		}
		if !reflect.DeepEqual(got, cmds) {
			t.Fatalf("%d: round trip\n got %+v\nwant %+v", i, got, cmds)
		}
	}
}

func TestDecodeEntryDoesNotAlias(t *testing.T) {
	b := EncodeEntry(nil, sampleCommands()[:1])
	cmds, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xff
	}
	if cmds[0].Key != "stripe-live:evt_1" || string(cmds[0].Payload) != `{"id":"evt_1"}` || cmds[0].Headers[0].Name != "Stripe-Signature" {
		t.Fatalf("decoded command changed with its input: %+v", cmds[0])
	}
}

// TestDecodeEntryShared: the in-place decoding yields the same commands as
// the copying one, for good and bad input alike, and does alias its input.
func TestDecodeEntryShared(t *testing.T) {
	inputs := [][]byte{EncodeEntry(nil, sampleCommands()), EncodeEntry(nil, nil), {relayVersion, 1, byte(OpClaim), 1 << fieldKey, 9, 'a'}}
	for _, c := range sampleCommands() {
		inputs = append(inputs, EncodeEntry(nil, []Command{c}))
	}
	for i, b := range inputs {
		want, werr := DecodeEntry(b)
		got, gerr := DecodeEntryShared(b)
		if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: shared = %+v, %v; copying = %+v, %v", i, got, gerr, want, werr)
		}
	}
	b := EncodeEntry(nil, sampleCommands()[:1])
	cmds, err := DecodeEntryShared(b)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(cmds[0].Key) != &b[bytes.Index(b, []byte("stripe-live:evt_1"))] ||
		&cmds[0].Payload[0] != &b[bytes.Index(b, []byte(`{"id":"evt_1"}`))] {
		t.Fatal("DecodeEntryShared copied its input")
	}
}

func TestDecodeEntryRejects(t *testing.T) {
	good := EncodeEntry(nil, sampleCommands())
	tests := map[string][]byte{
		"empty":            nil,
		"version":          {0, 0},
		"truncated":        good[:len(good)-1],
		"trailing":         append(bytes.Clone(good), 0),
		"huge count":       {relayVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"zero now":         {relayVersion, 1, byte(OpNoop), 1 << fieldNow, 0},
		"empty key":        {relayVersion, 1, byte(OpClaim), 1 << fieldKey, 0},
		"key past the end": {relayVersion, 1, byte(OpClaim), 1 << fieldKey, 9, 'a'},
		"format 0":         {entryVersion, 0, 0},
		"no format":        {entryVersion},
		"huge count, v2":   {entryVersion, FormatVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		// A content type belongs to a response, and is never empty.
		"content type without a response": append([]byte{relayVersion, 1, byte(OpComplete)}, append(uvarint(1<<fieldResponseType), 1, 'x')...),
		"empty content type":              append([]byte{relayVersion, 1, byte(OpComplete)}, append(uvarint(1<<fieldResponse|1<<fieldResponseType), 0x90, 0x03, 0, 0)...),
	}
	for name, b := range tests {
		if cmds, err := DecodeEntry(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeEntry(%x) = %v, %v; want ErrCorrupt", name, b, cmds, err)
		}
	}
}

func sampleEvents() []Event {
	return []Event{
		{State: StatePending, Source: "s"},
		{State: StateDead, Source: "stripe-live", Attempts: 8, Token: 1 << 40, CreatedAt: t0, UpdatedAt: t0 + 1,
			NextAttemptAt: -7, LeaseUntil: t0 + 30*sec, ExpiresAt: t0 + hour, LeaseFor: sec, LastError: "boom",
			Audit: []AuditEntry{{At: t0, Who: "ops", Action: "replay", Reason: "r", From: StateDone}, {From: StateDead}}},
		{State: StatePending, Source: "s", Attempts: 1, Token: 3, LastError: "status 500", Step: "charged"},
		{State: StateDone, Source: "s", Step: "3", Audit: []AuditEntry{{Who: "ops"}}},
		{State: StatePending, Source: "s", OrderObject: "pi_1", OrderTime: -7, OrderIndex: 1 << 40, OrderPos: 3},
		{State: StateStale, Source: "s", Step: "x", OrderObject: "\x00", OrderTime: 1},
		{State: StateDone, Source: "s", Retention: 25 * hour, PayloadDropAt: t0 + 72*hour},
		{State: StateDead, Source: "s", Step: "x", Retention: hour},
		{State: StateDone, Source: "s", PayloadDropAt: -1},
		{State: StatePending, Source: "s", Step: "y", OrderObject: "s:o", OrderTime: 5, Retention: hour},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for i, ev := range sampleEvents() {
		for _, flags := range []byte{0, flagResponse, flagBody, flagResponse | flagBody, flagHistory} {
			b := appendRecord(nil, &ev, flags)
			if len(b) > recordSize(&ev) {
				t.Fatalf("%d: record of %d bytes over its size bound %d", i, len(b), recordSize(&ev))
			}
			want := flags
			if ev.Step != "" {
				want |= flagStep // set from the event, whatever the caller passed
			}
			if ev.OrderObject != "" {
				want |= flagOrder // likewise
			}
			if ev.Retention != 0 || ev.PayloadDropAt != 0 {
				want |= flagLife // likewise
			}

			var got Event
			gf, err := decodeRecord([]byte("k"), b, &got)
			if err != nil || gf != want || !reflect.DeepEqual(got, ev) {
				t.Fatalf("%d: round trip = %+v, %d, %v; want %+v", i, got, gf, err, ev)
			}
			if st, err := recordState([]byte("k"), b); err != nil || st != ev.State {
				t.Fatalf("%d: recordState = %d, %v", i, st, err)
			}
		}
	}
	hs := []Header{{"A", "1"}, {"", ""}}
	hb := appendPayload(nil, hs, []byte("body"))
	if len(hb) > payloadSize(hs, []byte("body")) {
		t.Fatalf("payload over its size bound")
	}
	h, err := decodePayloadHead([]byte("k"), hb)
	if err != nil || h.pieced || !reflect.DeepEqual(h.headers, hs) || string(h.payload) != "body" {
		t.Fatalf("payload round trip = %+v %v", h, err)
	}
	hb = appendPiecedHead(nil, hs, 3*pieceLen+1, pieceLen)
	if len(hb) > payloadSize(hs, nil)+binary.MaxVarintLen64 {
		t.Fatalf("pieced payload head over its size bound")
	}
	h, err = decodePayloadHead([]byte("k"), hb)
	if err != nil || !h.pieced || !reflect.DeepEqual(h.headers, hs) || h.n != 3*pieceLen+1 || h.plen != pieceLen || h.payload != nil {
		t.Fatalf("pieced payload head round trip = %+v %v", h, err)
	}
	for _, r := range []*Response{
		{Status: 500, Body: []byte("x")},
		{Status: 200, Body: []byte("<Response/>"), ContentType: "text/xml"},
		{Status: 204, ContentType: "text/plain"},
	} {
		b := appendResponse(nil, r)
		gr, err := decodeResponse([]byte("k"), b)
		if err != nil || !reflect.DeepEqual(gr, r) {
			t.Fatalf("response round trip = %+v %v, want %+v", gr, err, r)
		}
		// A response without a content type keeps the bytes older binaries
		// wrote (version 1); only one with a content type is version 2.
		if want := byte(responseVersion); r.ContentType != "" {
			if want = responseTypeVersion; b[0] != want {
				t.Fatalf("%+v written as version %d, want %d", r, b[0], want)
			}
		} else if b[0] != want {
			t.Fatalf("%+v written as version %d, want %d", r, b[0], want)
		}
	}
	if _, err := decodeResponse([]byte("k"), []byte{responseTypeVersion, 0x90, 0x03, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version 2 response with an empty content type: %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeRecord: decoding never panics, errors wrap ErrCorrupt, and a
// decoded record re-encodes to bytes that decode to the same record.
func FuzzDecodeRecord(f *testing.F) {
	for _, ev := range sampleEvents() {
		f.Add(appendRecord(nil, &ev, 0))
		f.Add(appendRecord(nil, &ev, flagResponse))
	}
	f.Add(appendPayload(nil, []Header{{"A", "1"}}, []byte("p")))
	f.Add([]byte{recordVersion, 1, 0})
	f.Add(appendResponse(nil, &Response{Status: 200, Body: []byte("ok"), ContentType: "application/json"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		key := []byte("k")
		var ev Event
		flags, err := decodeRecord(key, b, &ev)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrNewerFormat", err)
			}
		} else {
			if st, err := recordState(key, b); err != nil || st != ev.State {
				t.Fatalf("recordState = %d, %v; decodeRecord says %d", st, err, ev.State)
			}
			b2 := appendRecord(nil, &ev, flags)
			if len(b2) > recordSize(&ev) {
				t.Fatalf("re-encoding over its size bound")
			}
			var ev2 Event
			flags2, err := decodeRecord(key, b2, &ev2)
			if err != nil || flags2 != flags || !reflect.DeepEqual(ev, ev2) {
				t.Fatalf("round trip: %+v, %v; want %+v", ev2, err, ev)
			}
			if b3 := appendRecord(nil, &ev2, flags2); !bytes.Equal(b2, b3) {
				t.Fatalf("re-encoding is not stable")
			}
		}
		// The other stored values share the decoder.
		if h, err := decodePayloadHead(key, b); err == nil {
			enc := appendPayload(nil, h.headers, h.payload)
			if h.pieced {
				enc = appendPiecedHead(nil, h.headers, h.n, h.plen)
			}
			h2, err := decodePayloadHead(key, enc)
			if err != nil || !reflect.DeepEqual(h, h2) {
				t.Fatalf("payload round trip: %+v, %v; want %+v", h2, err, h)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("payload error %v does not wrap ErrCorrupt", err)
		}
		if r, err := decodeResponse(key, b); err == nil {
			r2, err := decodeResponse(key, appendResponse(nil, r))
			if err != nil || !reflect.DeepEqual(r, r2) {
				t.Fatalf("response round trip: %v", err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("response error %v does not wrap ErrCorrupt", err)
		}
	})
}

// FuzzDecodeEntry: decoding never panics, errors wrap ErrCorrupt (or
// ErrNewerFormat for a newer binary's version, field or op), and a
// decoded entry re-encodes to exactly its input (the encoding is canonical).
func FuzzDecodeEntry(f *testing.F) {
	f.Add(EncodeEntry(nil, sampleCommands()))
	for _, c := range sampleCommands() {
		f.Add(EncodeEntry(nil, []Command{c}))
	}
	f.Add(EncodeEntry(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		cmds, err := DecodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerFormat) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrNewerFormat", err)
			}
			return
		}
		// The commands have one encoding, whatever the header: version 1
		// (a relay) has none more, version 2 the writer's format, which
		// may be older than ours.
		hdr := 1
		if b[0] == entryVersion {
			_, n := binary.Uvarint(b[1:])
			hdr += n
		}
		if got := appendCommands(nil, cmds); !bytes.Equal(b[hdr:], got) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b[hdr:], got)
		}
		if cmds3, err := DecodeEntryShared(b); err != nil || !reflect.DeepEqual(cmds, cmds3) {
			t.Fatalf("shared decoding differs: %v", err)
		}
		// Through EncodeEntry the commands come back the same, but for the
		// meanings of their writer's format (an older entry's), which a
		// re-encoding by this binary replaces with its own.
		cmds2, err := DecodeEntry(EncodeEntry(nil, cmds))
		for i := range cmds {
			cmds[i].format = 0
		}
		if err != nil || !reflect.DeepEqual(cmds, cmds2) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestEncodeEntrySizesItsBuffer: an entry is encoded into one allocation
// of the size commandsSize estimates, never grown on the way.
func TestEncodeEntrySizesItsBuffer(t *testing.T) {
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	// The large variable fields first, before other commands' allowances
	// could hide one left out of the estimate.
	cmds := []Command{
		{Op: OpFail, Now: t0, Key: "k", Token: 9, Reason: strings.Repeat("r", 300),
			Attempt: &Attempt{Status: 500, Error: strings.Repeat("e", 300), Body: make([]byte, MaxAttemptBody)}},
		{Op: OpReplay, Now: t0, Keys: keys, Who: strings.Repeat("w", 200), Reason: "fixed"},
	}
	cmds = append(cmds, sampleCommands()...)
	for range 64 {
		cmds = append(cmds, benchClaim(benchKey(len(cmds)), t0, benchPayload))
	}
	for n := 1; n <= len(cmds); n++ {
		got := EncodeEntry(nil, cmds[:n])
		if want := commandsSize(cmds[:n]); len(got) > want {
			t.Fatalf("%d commands: %d bytes encoded, estimated %d", n, len(got), want)
		}
	}
	if raceEnabled {
		return // the race detector's instrumentation allocates on its own
	}
	if a := testing.AllocsPerRun(10, func() { EncodeEntry(nil, cmds) }); a != 1 {
		t.Errorf("EncodeEntry of %d commands: %.0f allocations, want 1", len(cmds), a)
	}
}
