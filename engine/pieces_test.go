package engine

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// largeClaim is a claim whose payload has n bytes that differ from piece
// to piece (a piece read in the wrong place shows).
func largeClaim(key string, now int64, n int) Command {
	c := claimCmd(key, now)
	c.Payload = make([]byte, n)
	for i := range c.Payload {
		c.Payload[i] = byte(i/251 + i)
	}
	c.Headers = append(c.Headers, Header{Name: "Webhook-Id", Value: key})
	return c
}

// piecesOf counts the pieces stored for key's payload, and all pieces.
func piecesOf(tb testing.TB, e *Engine, created int64, key string) (mine, all int) {
	tb.Helper()
	pk := append(appendTime(nil, created), key...)
	err := e.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bPieces)
		if b == nil {
			return errors.New("no pieces bucket")
		}
		return b.ForEach(func(k, _ []byte) error {
			all++
			if len(k) == len(pk)+4 && bytes.HasPrefix(k, pk) {
				mine++
			}
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return mine, all
}

// TestLargePayloadsInPieces: a payload longer than pieceLen is stored in
// pieces and comes back byte for byte, headers included, from Get and from
// a lease; one no longer is stored whole. Dropping or deleting the payload
// deletes its pieces.
func TestLargePayloadsInPieces(t *testing.T) {
	for _, n := range []int{0, 1, pieceLen, pieceLen + 1, 2 * pieceLen, 3*pieceLen + 17, 1<<20 + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			c := largeClaim("src:big", t0, n)
			if r := h.one(c); !r.Created {
				t.Fatalf("claim = %+v", r)
			}
			want := 0
			if n > pieceLen {
				want = (n + pieceLen - 1) / pieceLen
			}
			if mine, all := piecesOf(t, h.e, t0, c.Key); mine != want || all != want {
				t.Fatalf("%d pieces stored (%d in all), want %d", mine, all, want)
			}
			ev := h.get(c.Key)
			if !bytes.Equal(ev.Payload, c.Payload) || !reflect.DeepEqual(ev.Headers, c.Headers) {
				t.Fatalf("Get: %d bytes, headers %v; want %d bytes, %v", len(ev.Payload), ev.Headers, n, c.Headers)
			}
			// The lease reads it in the transaction that wrote it...
			h.e.Close()
			h.e = mustOpenPath(t, h.e.Path(), Options{NoSync: true})
			r := h.one(leaseCmd(t0+sec, 1))
			if r.N != 1 || !bytes.Equal(r.Events[0].Payload, c.Payload) || !reflect.DeepEqual(r.Events[0].Headers, c.Headers) {
				t.Fatalf("lease after a reopen: %d events, payload of %d bytes", r.N, len(r.Events[0].Payload))
			}
			// ... and the pieces go with the payload.
			done := completeCmd(c.Key, r.Events[0].Token, t0+2*sec)
			done.PayloadRetention = sec
			if r := h.one(done); r.Err != nil {
				t.Fatal(r.Err)
			}
			if r := h.one(Command{Op: OpDropPayloads, Now: t0 + 4*sec, Before: t0 + 4*sec}); r.N != 1 {
				t.Fatalf("drop payloads dropped %d", r.N)
			}
			if _, all := piecesOf(t, h.e, t0, c.Key); all != 0 {
				t.Fatalf("%d pieces left after the payload was dropped", all)
			}
			if ev := h.get(c.Key); ev.Payload != nil || ev.Headers != nil {
				t.Fatalf("dropped payload still read: %d bytes", len(ev.Payload))
			}
		})
	}
}

// TestPiecesGoWithTheirEvent: expiry and purge delete an event's pieces
// and leave every other payload's alone, also one claimed in the same
// entry, and a lease in the claim's own entry reads them.
func TestPiecesGoWithTheirEvent(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	a, b, small := largeClaim("src:a", t0, 5*pieceLen/2), largeClaim("src:b", t0, 3*pieceLen), claimCmd("src:c", t0)
	rs := h.apply(a, b, small, leaseCmd(t0, 3))
	if got := rs[3].N; got != 3 {
		t.Fatalf("lease in the claims' entry leased %d", got)
	}
	for _, ev := range rs[3].Events {
		want := map[string][]byte{a.Key: a.Payload, b.Key: b.Payload, small.Key: small.Payload}[ev.Key]
		if !bytes.Equal(ev.Payload, want) {
			t.Fatalf("lease in the claims' entry: %s has %d bytes, want %d", ev.Key, len(ev.Payload), len(want))
		}
	}
	// a fails for good and is purged; b is done and expires.
	tok := rs[3].Events[0].Token
	h.apply(failCmd(a.Key, tok, t0+sec, 1), completeCmd(b.Key, tok, t0+sec), completeCmd(small.Key, tok, t0+sec))
	if r := h.one(Command{Op: OpPurge, Now: t0 + 2*sec, State: StateDead, Before: t0 + 2*sec, Max: 10, Who: "ops", Reason: "test"}); r.N != 1 {
		t.Fatalf("purge = %+v", r)
	}
	if mine, all := piecesOf(t, h.e, t0, b.Key); mine != 3 || all != 3 {
		t.Fatalf("after the purge of a: b has %d pieces of %d left, want 3 of 3", mine, all)
	}
	if ev := h.get(b.Key); !bytes.Equal(ev.Payload, b.Payload) {
		t.Fatalf("b after a's purge: %d bytes", len(ev.Payload))
	}
	h.one(Command{Op: OpExpire, Now: t0 + 48*hour})
	if _, all := piecesOf(t, h.e, t0, b.Key); all != 0 {
		t.Fatalf("%d pieces left after expiry", all)
	}
	if _, err := h.e.Get(b.Key, true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b after expiry: %v", err)
	}
}

// TestPiecesAreFormat14: an entry of a binary before formatPieces stores a
// large payload whole, as that binary does, so that replicas running
// either binary during an upgrade write identical files; both read back.
func TestPiecesAreFormat14(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	old := largeClaim("src:old", t0, 2*pieceLen)
	old.format = formatPieces - 1
	h.one(old)
	if _, all := piecesOf(t, h.e, t0, old.Key); all != 0 {
		t.Fatalf("a format %d claim stored %d pieces", old.format, all)
	}
	h.one(largeClaim("src:new", t0, 2*pieceLen))
	if mine, _ := piecesOf(t, h.e, t0, "src:new"); mine != 2 {
		t.Fatalf("a format %d claim stored %d pieces, want 2", FormatVersion, mine)
	}
	r := h.one(leaseCmd(t0+sec, 2))
	for _, ev := range r.Events {
		if len(ev.Payload) != 2*pieceLen {
			t.Fatalf("%s leased with %d bytes", ev.Key, len(ev.Payload))
		}
	}
}

// TestCheckFindsBrokenPieces: the index check reports a piece missing,
// cut, extra or left without its payload, and a lease of the event with a
// piece missing fails as corrupt rather than delivering part of a body.
func TestCheckFindsBrokenPieces(t *testing.T) {
	pk := append(appendTime(nil, t0), "src:big"...)
	for _, tc := range []struct {
		name    string
		breakIt func(b *bolt.Bucket) error
	}{
		{"missing", func(b *bolt.Bucket) error { return b.Delete(pieceKey(nil, pk, 1)) }},
		{"cut", func(b *bolt.Bucket) error { return b.Put(pieceKey(nil, pk, 2), []byte("short")) }},
		{"extra", func(b *bolt.Bucket) error { return b.Put(pieceKey(nil, pk, 3), []byte("x")) }},
		{"orphan", func(b *bolt.Bucket) error { return b.Put(pieceKey(nil, []byte("01234567src:none"), 0), []byte("x")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Open(t.TempDir()+"/engine.db", Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if _, err := e.Apply(1, largeClaim("src:big", t0, 2*pieceLen+1)); err != nil {
				t.Fatal(err)
			}
			if err := e.Check(); err != nil {
				t.Fatalf("check before: %v", err)
			}
			if err := e.db.Update(func(tx *bolt.Tx) error { return tc.breakIt(tx.Bucket(bPieces)) }); err != nil {
				t.Fatal(err)
			}
			if err := e.Check(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("check after a piece went %s: %v", tc.name, err)
			}
			if tc.name == "missing" || tc.name == "cut" {
				if _, err := e.Get("src:big", true); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Get with a piece %s: %v", tc.name, err)
				}
				if _, err := e.Apply(2, leaseCmd(t0+sec, 1)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("lease with a piece %s: %v", tc.name, err)
				}
			}
		})
	}
}

// TestPiecesOfKeysThatExtendEachOther: the pieces of an event key that
// extends another by bytes below the piece numbers sort between the other
// payload's pieces; both payloads still read back whole.
func TestPiecesOfKeysThatExtendEachOther(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	a := largeClaim("src:a", t0, 2*pieceLen+1)
	b := largeClaim("src:a\x00\x00\x00\x00z", t0, 2*pieceLen+1)
	h.apply(a, b)
	for _, c := range []Command{a, b} {
		if ev := h.get(c.Key); !bytes.Equal(ev.Payload, c.Payload) {
			t.Fatalf("Get(%q) = %d bytes, want its own %d", c.Key, len(ev.Payload), len(c.Payload))
		}
	}
	if r := h.one(leaseCmd(t0+sec, 2)); r.N != 2 {
		t.Fatalf("leased %d of 2", r.N)
	}
}
