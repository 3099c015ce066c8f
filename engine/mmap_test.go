package engine

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// A raft snapshot holds a read transaction open for as long as it copies the
// file. Writes that grow the file must go on meanwhile: with bbolt's remap
// waiting for every open read, a map smaller than the file's growth held
// every apply until the copy ended (DefaultInitialMmapSize).
func TestWritesGrowTheFileWhileASnapshotIsOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 300 MiB")
	}
	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:first", t0))
	view, err := h.e.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()

	const grow = 300 << 20 // past the 256 MiB map bbolt would start with
	payload := bytes.Repeat([]byte("x"), 512<<10)
	done := make(chan error, 1)
	go func() {
		for i := range grow / len(payload) {
			c := claimCmd(fmt.Sprintf("src:big%04d", i), t0)
			c.Payload = payload
			if _, err := h.e.Apply(uint64(i+2), c); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Only a hang fails this test; a pass takes a few seconds.
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		view.Close() // lets the writes end, so the goroutine does too
		<-done
		t.Fatal("writes that grew the file waited for the open snapshot")
	}
	st, err := os.Stat(h.e.path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < grow {
		t.Fatalf("the file grew to %d bytes only; the test needs more than %d", st.Size(), grow)
	}
	// The snapshot still sees the state as of its start.
	var snap bytes.Buffer
	if _, err := view.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if snap.Len() >= grow {
		t.Fatalf("snapshot of %d bytes holds the later writes", snap.Len())
	}
}
