package engine

import "testing"

func TestStateNames(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range States {
		name := s.String()
		if name == "unknown" || seen[name] {
			t.Fatalf("state %d has name %q (duplicate or missing)", s, name)
		}
		seen[name] = true
		back, ok := ParseState(name)
		if !ok || back != s {
			t.Fatalf("ParseState(%q) = %d, %v; want %d", name, back, ok, s)
		}
	}
	for _, bad := range []string{"", "Pending", "unknown", "pending "} {
		if s, ok := ParseState(bad); ok {
			t.Fatalf("ParseState(%q) = %d, want no state", bad, s)
		}
	}
	if State(0).String() != "unknown" || State(200).String() != "unknown" {
		t.Fatal("a value that is not a state must print as unknown")
	}
}

func TestReplayableStates(t *testing.T) {
	want := map[State]bool{StateDone: true, StateDead: true, StateStale: true}
	for _, s := range States {
		if Replayable(s) != want[s] {
			t.Fatalf("Replayable(%s) = %v", s, Replayable(s))
		}
	}
}

func TestOpNames(t *testing.T) {
	for o := OpClaim; o <= OpPurge; o++ {
		if n := o.String(); n == "" || n[0] == 'o' && n[1] == 'p' && n[2] == '(' {
			t.Fatalf("op %d has no name", o)
		}
	}
	if Op(250).String() != "op(250)" {
		t.Fatalf("unknown op prints %q", Op(250).String())
	}
}
