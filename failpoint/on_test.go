//go:build failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want map[string]action
		err  string
	}{
		{"", map[string]action{}, ""},
		{"a=panic", map[string]action{"a": {kind: actPanic}}, ""},
		{" a = panic ; b=sleep(250ms),c=off\n", map[string]action{"a": {kind: actPanic}, "b": {kind: actSleep, d: 250 * time.Millisecond}, "c": {}}, ""},
		{"a", nil, "want name=action"},
		{"=panic", nil, "want name=action"},
		{"a=explode", nil, "unknown action"},
		{"a=sleep(x)", nil, "bad sleep"},
		{"a=sleep(-1s)", nil, "bad sleep"},
	} {
		got, err := parse(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parse(%q): err %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parse(%q) = %v, %v; want %v", tc.spec, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("parse(%q)[%s] = %v, want %v", tc.spec, k, got[k], v)
			}
		}
	}
}

func TestInjectActions(t *testing.T) {
	if !Enabled {
		t.Fatal("Enabled is false in the failpoints build")
	}
	m, _ := parse("fp.panic=panic;fp.sleep=sleep(150ms);fp.off=off")
	dynamic.Store(&m)
	defer dynamic.Store(nil)
	sleeps, panics := Hits("fp.sleep"), Hits("fp.panic")

	Inject("fp.off")
	Inject("fp.unknown")
	start := time.Now()
	Inject("fp.sleep")
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("sleep(150ms) slept %s", d)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "fp.panic") {
				t.Errorf("panic action: recovered %v", r)
			}
		}()
		Inject("fp.panic")
		t.Error("panic action did not panic")
	}()
	if Hits("fp.sleep")-sleeps != 1 || Hits("fp.panic")-panics != 1 || Hits("fp.off") != 0 {
		t.Errorf("hits: sleep %d panic %d off %d", Hits("fp.sleep")-sleeps, Hits("fp.panic")-panics, Hits("fp.off"))
	}
}

// TestControlFiles: the failpoint file and the clock file are re-read while
// the process runs, so a harness can arm, disarm and jump mid-run.
func TestControlFiles(t *testing.T) {
	dir := t.TempDir()
	fp, clock := filepath.Join(dir, "fp"), filepath.Join(dir, "clock")
	defer dynamic.Store(nil)
	defer offset.Store(0)
	stop, err := setup("", fp, clock) // neither file exists yet
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if lookup("x").kind != actOff || offset.Load() != 0 {
		t.Fatal("missing control files armed something")
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("not within 2 s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	write(fp, "x=sleep(1ms)")
	eventually("x armed", func() bool { return lookup("x").kind == actSleep })
	write(fp, "x=off")
	eventually("x disarmed", func() bool { return lookup("x").kind == actOff })
	write(fp, "x=bogus") // a bad file keeps the previous set
	time.Sleep(3 * pollInterval)
	if lookup("x").kind != actOff {
		t.Error("a bad file replaced the armed set")
	}

	write(clock, "10m")
	eventually("clock +10m", func() bool { return Now().Sub(time.Now()) > 9*time.Minute })
	write(clock, "-6s")
	eventually("clock -6s", func() bool { d := time.Now().Sub(Now()); return d > 5*time.Second && d < 7*time.Second })
	write(clock, "")
	eventually("clock back", func() bool { return offset.Load() == 0 })
}
