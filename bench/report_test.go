package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestParseProcStat: the machine's busy and iowait time from /proc/stat,
// and what the report makes of two samples.
func TestParseProcStat(t *testing.T) {
	const two = "cpu  300 10 200 5000 40 0 30 20 7 0\ncpu0 150 5 100 2500 20 0 15 10 0 0\ncpu1 150 5 100 2500 20 0 15 10 0 0\nintr 1 2 3\nctxt 99\n"
	tests := []struct {
		name   string
		in     string
		ok     bool
		cores  int
		busy   time.Duration // (user+nice+system+irq+softirq+steal) ticks of 10 ms
		iowait time.Duration
	}{
		{"two cores", two, true, 2, 560 * 10 * time.Millisecond, 400 * time.Millisecond},
		{"no per-cpu lines", "cpu  1 0 1 1 0 0 0 0\n", false, 0, 0, 0},
		{"short cpu line", "cpu  1 2 3\ncpu0 1 2 3\n", false, 0, 0, 0},
		{"not a number", "cpu  1 x 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n", false, 0, 0, 0},
		{"empty", "", false, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := parseProcStat([]byte(tt.in))
			if m.ok != tt.ok {
				t.Fatalf("ok = %v, want %v (%+v)", m.ok, tt.ok, m)
			}
			if tt.ok && (m.cores != tt.cores || m.busy != tt.busy || m.iowait != tt.iowait) {
				t.Fatalf("got cores %d busy %v iowait %v, want %d %v %v", m.cores, m.busy, m.iowait, tt.cores, tt.busy, tt.iowait)
			}
		})
	}

	// Two samples one second apart: 1.5 cores busy, 0.25 waiting on I/O.
	at := time.Unix(1000, 0)
	a := cpuSample{at: at, machine: machineSample{ok: true, cores: 2, busy: 10 * time.Second, iowait: time.Second}}
	b := cpuSample{at: at.Add(time.Second), machine: machineSample{ok: true, cores: 2, busy: 11500 * time.Millisecond, iowait: 1250 * time.Millisecond}}
	c := cpuUsage(a, b)
	if c.Machine == nil || *c.Machine != (MachineCPU{Cores: 2, Busy: 1.5, IOWait: 0.25}) {
		t.Fatalf("machine %+v, want 1.5 of 2 busy, 0.25 iowait", c.Machine)
	}
	if s := fmtCPU(c); !strings.Contains(s, "machine: 1.50 of 2 busy, 0.25 iowait") {
		t.Fatalf("report line %q", s)
	}
	// A sample without /proc/stat leaves the machine out.
	if c := cpuUsage(cpuSample{at: at}, b); c.Machine != nil {
		t.Fatalf("machine %+v from a sample without /proc/stat", c.Machine)
	}

	// This machine's own file, where there is one.
	if raw, err := os.ReadFile("/proc/stat"); err == nil {
		if m := parseProcStat(raw); !m.ok || m.cores < 1 || m.busy <= 0 {
			t.Fatalf("/proc/stat of this machine: %+v", m)
		}
	}
}

// dirSize counts the files under a directory, a file by itself, and nothing
// for a path that is not there (a node without a snapshot yet).
func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("fsm.db", 4096)
	write("raft/logs.db", 1000)
	write("raft/snapshots/1-2-3/state.bin", 300)
	write("raft/snapshots/1-2-3/meta.json", 20)
	for _, tc := range []struct {
		path string
		want int64
	}{
		{dir, 5416},
		{filepath.Join(dir, "fsm.db"), 4096},
		{filepath.Join(dir, "raft", "snapshots"), 320},
		{filepath.Join(dir, "missing"), 0},
	} {
		if got := dirSize(tc.path); got != tc.want {
			t.Errorf("dirSize(%s) = %d, want %d", tc.path, got, tc.want)
		}
	}
}

// TestVerdict: a run fails (exit status 1) on an unexpected answer, an
// exactly-once violation or a claim not delivered by the end of the drain;
// a repeated delivery alone does not fail it.
func TestVerdict(t *testing.T) {
	for _, tt := range []struct {
		name string
		res  Result
		want string // "" = passes
	}{
		{"clean", Result{Delivery: &Delivery{Claimed: 10, Delivered: 10}}, ""},
		{"repeated delivery", Result{Delivery: &Delivery{Claimed: 10, Delivered: 10, Repeated: 2}}, ""},
		{"no sink", Result{}, ""},
		{"unexpected", Result{Unexpected: 20}, "20 unexpected answers"},
		{"violation", Result{Violations: 1}, "1 exactly-once violations"},
		{"not delivered", Result{Delivery: &Delivery{Claimed: 10, Delivered: 7, Pending: 3}}, "3 claims not delivered"},
	} {
		err := verdict(&tt.res)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: verdict = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestPendingNote: a run whose claims never reached the sink points at the
// source's forward URL, one that delivered some at the drain.
func TestPendingNote(t *testing.T) {
	for _, tt := range []struct {
		name string
		d    Delivery
		want string
	}{
		{"all delivered", Delivery{Claimed: 10, Delivered: 10}, ""},
		{"none delivered", Delivery{Claimed: 100, Pending: 100},
			"; none of the 100 claims reached the sink: check that the source's forward URL is the sink's address (-sink), then raise -drain for a slow handler"},
		{"some pending", Delivery{Claimed: 100, Delivered: 60, Pending: 40}, "; 40 claimed but not delivered when it ended: raise -drain"},
		{"others' keys only", Delivery{Claimed: 5, Pending: 5, Unclaimed: 3},
			"; 5 claimed but not delivered when it ended: raise -drain; 3 keys received that this run did not claim"},
	} {
		if got := pendingNote(&tt.d); got != tt.want {
			t.Errorf("%s: pendingNote = %q, want %q", tt.name, got, tt.want)
		}
	}
}
