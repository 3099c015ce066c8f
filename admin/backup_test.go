package admin

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// backupStore writes n bytes of a backup, then ends with err.
type backupStore struct {
	*engineStore
	n   int
	err error
}

func (s backupStore) Backup(w io.Writer) (int64, error) {
	n, err := w.Write(bytes.Repeat([]byte{0xAB}, s.n))
	if err != nil {
		return int64(n), err
	}
	return int64(n), s.err
}

// TestBackupStreamEndsOnlyWhenWhole: a chunked 200 that ends normally is what
// a client reads as a whole backup, so only a backup that completed ends so,
// with its length in the trailer. One that fails before its first byte is a
// 500 saying why; one that fails part way is cut, never ended.
func TestBackupStreamEndsOnlyWhenWhole(t *testing.T) {
	failed := errors.New("engine: write snapshot: a read error")
	for _, tc := range []struct {
		name    string
		n       int
		err     error
		status  int
		cut     bool
		trailer string
	}{
		{"whole", 8192, nil, http.StatusOK, false, "8192"},
		{"fails before its first byte", 0, failed, http.StatusInternalServerError, false, ""},
		{"fails part way", 8192, failed, http.StatusOK, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := newTestAPI(t, func(o *Options) {
				o.Store = backupStore{engineStore: o.Store.(*engineStore), n: tc.n, err: tc.err}
			})
			req, _ := http.NewRequest(http.MethodGet, url+"/v1/backup", nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, rerr := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, b)
			}
			if tc.status != http.StatusOK {
				if !strings.Contains(string(b), "backup failed: engine: write snapshot: a read error") {
					t.Errorf("the answer does not say why: %s", b)
				}
				return
			}
			if cut := rerr != nil; cut != tc.cut {
				t.Fatalf("stream cut %v (%v), want %v", cut, rerr, tc.cut)
			}
			if got := resp.Trailer.Get(BackupTrailer); got != tc.trailer {
				t.Errorf("trailer %q, want %q", got, tc.trailer)
			}
		})
	}
}
