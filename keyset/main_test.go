package keyset

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that every key set's fetcher stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http's client keeps idle connections' goroutines until they time out.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
