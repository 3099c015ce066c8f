package forward

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"oncehook/engine"
)

// TestAnswerBeforeTheBodyIsRead: a handler that answers on the headers
// alone, without reading a body too large for the sockets' buffers, and
// closes (net/http's server resets the connection once its wait for the
// unread body ends), gave an answer: the writes fail on the reset, and the
// answer, already received, is the attempt's outcome. Before, the attempt
// failed with "broken pipe", was sent again on a new connection, and the
// event went dead with every attempt answered 200.
func TestAnswerBeforeTheBodyIsRead(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   engine.State
	}{
		{http.StatusOK, engine.StateDone},
		{http.StatusRequestEntityTooLarge, engine.StateDead},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			l := newLeader(t)
			var calls atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(tc.status) // not interested: the body stays unread
			})}
			served := make(chan struct{})
			go func() { defer close(served); _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close(); <-served })
			l.claim("src:big", "src", strings.Repeat("x", 16<<20))
			start(t, l, &recorder{}, Options{Targets: only(Target{URL: "http://" + ln.Addr().String() + "/hook",
				MaxAttempts: 1})})
			waitFor(t, "the event finished", func() bool {
				st := l.get("src:big").State
				return st == engine.StateDone || st == engine.StateDead
			})
			ev := l.get("src:big")
			if ev.State != tc.want || calls.Load() != 1 {
				t.Fatalf("handler answered %d, called %d times: event %s after %d attempts (%q); want %s after one call",
					tc.status, calls.Load(), ev.State, ev.Attempts, ev.LastError, tc.want)
			}
			if tc.status != http.StatusOK && !strings.Contains(ev.LastError, "413") {
				t.Fatalf("the last error %q does not name the handler's answer", ev.LastError)
			}
		})
	}
}
