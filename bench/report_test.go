package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadCommit reads HEAD's commit in a plain checkout (loose and packed
// branch) and in a linked worktree, whose .git is a file.
func TestReadCommit(t *testing.T) {
	const hash = "0123456789abcdef0123456789abcdef01234567"
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo := t.TempDir()
	write(filepath.Join(repo, ".git", "HEAD"), "ref: refs/heads/main\n")
	write(filepath.Join(repo, ".git", "refs", "heads", "main"), hash+"\n")
	write(filepath.Join(repo, ".git", "packed-refs"), "# pack-refs\n"+"fedcba9876543210fedcba9876543210fedcba98 refs/heads/packed\n")
	write(filepath.Join(repo, ".git", "worktrees", "wt", "HEAD"), "ref: refs/heads/packed\n")
	write(filepath.Join(repo, ".git", "worktrees", "wt", "commondir"), "../..\n")
	wt := t.TempDir()
	write(filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(repo, ".git", "worktrees", "wt")+"\n")

	for _, tc := range []struct{ root, want string }{
		{repo, "0123456"},
		{wt, "fedcba9"},
		{t.TempDir(), "nogit"},
	} {
		if got := readCommit(tc.root); got != tc.want {
			t.Errorf("readCommit(%s) = %s, want %s", tc.root, got, tc.want)
		}
	}
}
