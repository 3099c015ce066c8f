package keyset

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fetchLog answers keys_url fetches: a failure for the first fails, then
// an empty document; it records when each fetch came, from its start.
type fetchLog struct {
	mu    sync.Mutex
	start time.Time
	fails int
	at    []time.Duration
}

func (f *fetchLog) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Since(f.start))
	status, body := http.StatusOK, `{"keys":[]}`
	if len(f.at) <= f.fails {
		status, body = http.StatusServiceUnavailable, "down"
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: r}, nil
}

// After a failed periodic fetch the next comes after keysRetryAfter, or
// after keys_refresh when that is shorter, and a fetch that succeeds puts
// the schedule back to keys_refresh.
func TestKeysRefetchAfterAFailureSynctest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refresh time.Duration
		want    []time.Duration
	}{
		{"refresh longer than the retry", time.Hour, []time.Duration{
			time.Hour, time.Hour + keysRetryAfter, time.Hour + 2*keysRetryAfter, 2*time.Hour + 2*keysRetryAfter}},
		{"refresh shorter than the retry", 10 * time.Second, []time.Duration{
			10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fetchLog{start: time.Now(), fails: 2}
				ks := testKeyset(t, "https://keys.example/doc")
				ks.client = &http.Client{Transport: f}
				ks.mu.Lock()
				ks.refresh = tc.refresh
				ks.mu.Unlock()
				ks.wg.Add(1)
				go ks.run(tc.refresh)
				time.Sleep(tc.want[len(tc.want)-1] + time.Second)
				synctest.Wait()
				f.mu.Lock()
				defer f.mu.Unlock()
				if !slices.Equal(f.at, tc.want) {
					t.Errorf("fetches at %v, want %v", f.at, tc.want)
				}
			})
		})
	}
}

// TestCacheWriteFollowsNoLink: the keys cache is written through a temporary
// file that is never a link followed to somewhere else.
func TestCacheWriteFollowsNoLink(t *testing.T) {
	ks := testKeyset(t, "https://keys.example/doc")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(ks.cache), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, ks.cache+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := ks.saveCache([]byte(`{"keys":[]}`)); err == nil {
		t.Error("the cache was written through a link")
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q, %v", b, err)
	}
}
