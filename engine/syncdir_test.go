package engine

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		dir     string
		wantErr error
	}{
		{"existing directory", dir, nil},
		{"missing directory", filepath.Join(dir, "missing"), fs.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := SyncDir(tc.dir)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("SyncDir(%s) = %v, want %v", tc.dir, err, tc.wantErr)
			}
		})
	}
}
