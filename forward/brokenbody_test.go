package forward

import (
	"net/http"
	"testing"

	"oncehook/engine"
)

// TestTwoXXWithABrokenBody: a handler that sends a 2xx status line and
// headers, then closes before the body it announced, has completed an
// async event (its status is the answer) in one attempt; for a sync source
// the sender needs that body, so the attempt fails, is recorded, and the
// event is sent again (README, "What your handler receives").
func TestTwoXXWithABrokenBody(t *testing.T) {
	for _, sync := range []bool{false, true} {
		l := newLeader(t)
		srv := serve(t, &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
			if n > 1 {
				return // the next attempt is answered whole (200, no body)
			}
			c, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
			rw.Flush()
			c.Close()
		}})
		l.claim("src:b", "src", "x")
		start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, Sync: sync, MaxAttempts: 5, BackoffMin: 1, BackoffMax: 1})})
		waitFor(t, "done", stateIs(l, "src:b", engine.StateDone))
		ev, err := l.eng.Get("src:b", false)
		if err != nil {
			t.Fatal(err)
		}
		want := uint32(1)
		if sync {
			want = 2
		}
		if ev.Attempts != want {
			t.Errorf("sync %v: done after %d attempts, want %d (%+v)", sync, ev.Attempts, want, ev)
		}
	}
}
