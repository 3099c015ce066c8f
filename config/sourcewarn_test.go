package config

import (
	"strings"
	"testing"
	"time"
)

func TestSourceWarnings(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(s *Source)
		want []string // prefixes, in order
	}{
		{"defaults", func(*Source) {}, nil},
		{"one second backoff", func(s *Source) { s.BackoffMin, s.BackoffMax = Duration(time.Second), Duration(time.Minute) }, nil},
		{"sub-second backoff", func(s *Source) {
			s.BackoffMin, s.BackoffMax = Duration(100*time.Millisecond), Duration(200*time.Millisecond)
		},
			[]string{"source[0].backoff_min: 100ms is under a second", "source[0].backoff_max: 200ms is under a second"}},
		{"an hour's tolerance", func(s *Source) { s.Tolerance = Duration(time.Hour) }, nil},
		{"ten years' tolerance", func(s *Source) { s.Tolerance = Duration(87600 * time.Hour) },
			[]string{"source[0].tolerance: 87600h lets a captured delivery verify for that long"}},
		{"dead retention as long as retention", func(s *Source) { s.Retention, s.DeadRetention = Duration(time.Hour), Duration(time.Hour) }, nil},
		{"dead retention shorter", func(s *Source) { s.Retention, s.DeadRetention = Duration(168*time.Hour), Duration(time.Hour) },
			[]string{"source[0].dead_retention: 1h is shorter than retention 168h"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Sources = []Source{{Name: "s", Provider: "stripe", Tolerance: Duration(5 * time.Minute)}}
			tt.edit(&c.Sources[0])
			got := append(append(subSecondBackoff(c), wideTolerance(c)...), deadRetentionBelowRetention(c)...)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start %q", got[i], w)
				}
			}
		})
	}
}

// TestLargeBodyWarning: a max_body in the tens of MiB on a cluster, and
// one under 1 KiB anywhere (every ordinary delivery refused), are warned of.
func TestLargeBodyWarning(t *testing.T) {
	three := []Peer{{ID: "a", Addr: "127.0.0.1:1"}, {ID: "b", Addr: "127.0.0.1:2"}, {ID: "c", Addr: "127.0.0.1:3"}}
	for _, tt := range []struct {
		name  string
		peers []Peer
		body  Size
		want  string // prefix; "" for none
	}{
		{"default on a cluster", three, DefaultMaxBody, ""},
		{"16 MiB on a cluster", three, 16 * MiB, ""},
		{"32 MiB on a cluster", three, 32 * MiB, "source[0].max_body: 32MiB lets one claim carry that much to every node"},
		{"64 MiB on one node", nil, MaxMaxBody, ""},
		{"1 KiB", nil, KiB, ""},
		{"10 bytes", nil, 10, "source[0].max_body: 10 refuses (413) every larger delivery"},
		{"1000 bytes on a cluster", three, 1000, "source[0].max_body: 1KB refuses (413)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			if tt.peers != nil {
				c.Cluster = &Cluster{Peers: tt.peers}
			}
			c.Sources = []Source{{Name: "s", Provider: "stripe", MaxBody: tt.body}}
			got := append(largeBodies(c), smallBodies(c)...)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
				t.Fatalf("warnings %q, want one starting %q", got, tt.want)
			}
		})
	}
}
