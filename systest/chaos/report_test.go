package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// writeReport writes a markdown table of every run to dir/report-<time>.md
// and copies it to dir/latest.md.
func writeReport(dir string, prof profile, rs []*result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	now := time.Now().UTC()
	fmt.Fprintf(&b, "# oncehook chaos report, %s\n\n", now.Format(time.RFC3339))
	fmt.Fprintf(&b, "Go %s, %d CPUs; warm-up %s, outage %s, recovery %s, %d load workers; lease %s, forward_timeout %s.\n\n",
		runtime.Version(), runtime.NumCPU(), prof.warm, prof.outage, prof.recovery, prof.workers, lease, fwdTimeout)
	b.WriteString("| scenario | seed | ops | acked | unknown (present/absent) | lost | unfinished | linearizable | double runs | runs after done | fenced (handler / oncehook) | late runs | converged | same hash | leader changes | unavail s | recovery s | claims/s before / during / after | ratio after/before | p99 before / during / after | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %s | %d | skipped | | | | | | | | | | | | | | | | | | |\n", r.Scenario, r.Seed)
			continue
		}
		v := "0"
		if len(r.Violations) > 0 {
			v = fmt.Sprintf("**%d**: %s", len(r.Violations), strings.ReplaceAll(strings.Join(r.Violations, "; "), "|", "/"))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d/%d) | %d | %d | %s | %d | %d | %d / %.0f | %d | %v | %v | %d | %.2f | %.2f | %.0f / %.0f / %.0f | %.2f | %s / %s / %s | %s |\n",
			r.Scenario, r.Seed, r.Ops, r.Acked, r.Unknown, r.UnknownPresent, r.UnknownAbsent, r.Lost, r.NotFinished,
			r.Linearizable, r.DoubleRuns, r.RunsAfterDone, r.FencedHandler, r.FencedOncehk, r.LateRuns,
			r.Converged, r.HashEqual, r.LeaderChanges, r.UnavailS, r.RecoveryS,
			r.BeforeRate, r.DuringRate, r.AfterRate, r.Ratio(),
			r.P99Before.Round(time.Millisecond), r.P99During.Round(time.Millisecond), r.P99After.Round(time.Millisecond), v)
	}
	b.WriteString("\nScenarios:\n\n")
	for _, sc := range scenarios {
		fmt.Fprintf(&b, "- %s: %s\n", sc.id, sc.name)
	}
	b.WriteString("\nNotes:\n\n")
	for _, r := range rs {
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s seed %d: %s\n", r.Scenario, r.Seed, n)
		}
		if r.VizPath != "" {
			fmt.Fprintf(&b, "- %s seed %d: porcupine visualisation %s\n", r.Scenario, r.Seed, r.VizPath)
		}
	}
	p := filepath.Join(dir, "report-"+now.Format("20060102-150405")+".md")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	return p, os.WriteFile(filepath.Join(dir, "latest.md"), []byte(b.String()), 0o644)
}
