package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseNodeMetrics(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 187
oncehook_raft_is_leader 1
oncehook_backlog{source="other"} 9
oncehook_backlog{source="bench"} 42
oncehook_events{state="pending"} 40
oncehook_events{state="done"} 9000
oncehook_events{state="dead"} 2
`
	m := parseNodeMetrics(strings.NewReader(text), "bench")
	if m.goroutines != 187 || !m.leader || m.backlog == nil || *m.backlog != 42 || m.events == nil || *m.events != 9042 {
		t.Fatalf("parsed %+v (backlog %v, events %v)", m, m.backlog, m.events)
	}
	m = parseNodeMetrics(strings.NewReader("oncehook_raft_is_leader 0\n"), "bench")
	if m.leader || m.backlog != nil || m.events != nil || m.goroutines != 0 {
		t.Fatalf("follower without the metrics parsed as %+v", m)
	}
}

// soakOf builds a one-node soak of n samples 10 s apart; node(i) gives the
// node's sample i and whether it leads then.
func soakOf(n int, node func(i int) (NodeSample, bool)) *Soak {
	sr := &Soak{Nodes: 1}
	for i := range n {
		ns, leads := node(i)
		ns.ID, ns.Up = "node1", true
		s := SoakSample{T: float64(10 * (i + 1)), Nodes: []NodeSample{ns}}
		if leads {
			s.Leader = "node1"
		} else {
			s.Leader = "node2"
		}
		sr.Samples = append(sr.Samples, s)
		sr.Intervals = append(sr.Intervals, Interval{From: float64(10 * i), To: float64(10 * (i + 1)), ClaimP99: 8000, DeliveryP99: 3000})
	}
	return sr
}

// TestJudgeSoak checks what the verdict adds to the rules: segments by
// process lifetime and role (a restart resets RSS; a follower that becomes
// leader starts the forwarder), the data dir over the whole run, and the
// outcomes no soak may show.
func TestJudgeSoak(t *testing.T) {
	const mib = 1 << 20
	flat := func(int) (NodeSample, bool) {
		return NodeSample{RSSBytes: 80 * mib, FDs: 40, Goroutines: 50, DataBytes: 60 * mib}, false
	}
	for _, tc := range []struct {
		name    string
		sr      *Soak
		pass    bool
		reasons []string // substrings, one per reason
	}{
		{"flat", soakOf(60, flat), true, nil},
		{"becomes leader: more goroutines and fds, flat in each role", soakOf(60, func(i int) (NodeSample, bool) {
			ns, _ := flat(i)
			if i >= 25 {
				ns.Goroutines, ns.FDs = 190, 160
			}
			return ns, i >= 25
		}), true, nil},
		{"restarted: the new process warms up to its own level, flat afterwards", soakOf(60, func(i int) (NodeSample, bool) {
			ns, _ := flat(i)
			ns.RSSBytes = 40 * mib
			if i >= 30 {
				ns.Life, ns.RSSBytes = 1, int64(min(40+6*(i-30), 82))*mib
			}
			return ns, false
		}), true, nil},
		{"goroutines leak within one process", soakOf(60, func(i int) (NodeSample, bool) {
			ns, _ := flat(i)
			ns.Goroutines = 50 + 4*i
			return ns, false
		}), false, []string{"node1 goroutines (process 1, follower 10..600 s) grows"}},
		{"data dir grows across restarts", soakOf(60, func(i int) (NodeSample, bool) {
			ns, _ := flat(i)
			ns.DataBytes = int64(20+2*i) * mib
			if i >= 30 {
				ns.Life = 1
			}
			return ns, false
		}), false, []string{"node1 data grows"}},
		{"claim p99 drifts", func() *Soak {
			sr := soakOf(60, flat)
			for i := 45; i < 60; i++ {
				sr.Intervals[i].ClaimP99 = 40000
			}
			return sr
		}(), false, []string{"claim p99 drifts"}},
		{"violations, undelivered claims, a failed leader change", func() *Soak {
			sr := soakOf(60, flat)
			sr.Result = &Result{Violations: 2, Delivery: &Delivery{Pending: 3}}
			sr.Transfers = []Transfer{{AtS: 180, From: "node1", Err: "no new leader within 30s"}}
			return sr
		}(), false, []string{"2 exactly-once violations", "3 claims not delivered", "leader change at 180s: no new leader"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeSoak(tc.sr)
			if v.Pass != tc.pass || len(v.Reasons) != len(tc.reasons) {
				t.Fatalf("verdict pass %v, reasons %q; want pass %v, %d reasons", v.Pass, v.Reasons, tc.pass, len(tc.reasons))
			}
			for i, want := range tc.reasons {
				if !strings.Contains(v.Reasons[i], want) {
					t.Fatalf("reason %d = %q; want it to contain %q", i, v.Reasons[i], want)
				}
			}
			if md := soakMarkdown(tc.sr); !strings.Contains(md, "## Footprint") {
				t.Fatalf("summary without its footprint table:\n%s", md)
			}
		})
	}
}

func TestSoakOptions(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-soak", "-spawn", "3"}, ""},
		{[]string{"-soak", "-target", "http://127.0.0.1:1", "-secret-file", "/dev/null"}, "needs -spawn"},
		{[]string{"-soak", "-spawn", "3", "-d", "1m"}, "at least 2m0s"},
		{[]string{"-soak", "-spawn", "3", "-sustain", "-rate-min", "1", "-rate-max", "2"}, "drop -sustain"},
		{[]string{"-soak", "-spawn", "3", "-soak-retention", "forever"}, "-soak-retention"},
	} {
		o, err := parseOptions(tc.args, &strings.Builder{})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%v: err %v; want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.rate != 300 || o.duration != 10*time.Minute || o.drain < soakMinDrain || o.soak.retention != "30s" {
			t.Fatalf("%v: defaults rate %g, -d %s, drain %s, retention %q", tc.args, o.rate, o.duration, o.drain, o.soak.retention)
		}
	}
	// Without -soak the spawned nodes keep the provider's retention.
	o, err := parseOptions([]string{"-spawn", "1"}, &strings.Builder{})
	if err != nil || o.soak.retention != "" {
		t.Fatalf("plain run: retention %q, err %v", o.soak.retention, err)
	}
}

func TestCheckFailpointsBuild(t *testing.T) {
	dir := t.TempDir()
	release, fp := dir+"/release", dir+"/failpoints"
	for path, body := range map[string]string{release: "\x7fELF ... no knobs here", fp: "\x7fELF ... " + envBucketWidth + " ..."} {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkFailpointsBuild(release); err == nil || !strings.Contains(err.Error(), "not a failpoints build") {
		t.Fatalf("release binary: %v", err)
	}
	if err := checkFailpointsBuild(fp); err != nil {
		t.Fatalf("failpoints binary: %v", err)
	}
}
