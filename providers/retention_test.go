package providers

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestRetentionCoversRetryWindow: every default retention outlives the
// provider's documented retry window by at least RetryMargin.
func TestRetentionCoversRetryWindow(t *testing.T) {
	for _, name := range Names() {
		s, _ := Lookup(name)
		d := s.Defaults()
		if d.RetryWindow < 0 || d.Retention < d.RetryWindow+RetryMargin {
			t.Errorf("%s: retention %v, want at least its retry window %v + %v", name, d.Retention, d.RetryWindow, RetryMargin)
		}
		if name != "hmac" && d.RetryWindow == 0 {
			t.Errorf("%s: no retry window", name)
		}
	}
}

// TestRetentionTablesAgree: the retention and retry-window columns of
// SCHEMES.md and docs/sources.md state the code's defaults.
func TestRetentionTablesAgree(t *testing.T) {
	tables := []struct {
		file   string
		header string // the table's header row starts with this
		col    int    // column of the value (0: provider)
		window bool   // the column is the retry window, not the retention
	}{
		{"SCHEMES.md", "| provider | signature header(s) |", 4, false},
		{"SCHEMES.md", "| provider | retry window |", 1, true},
		{"SCHEMES.md", "| provider | retry window |", 3, false},
		{"../docs/sources.md", "| provider | signature | signed bytes |", 4, false},
	}
	for _, tb := range tables {
		rows := markdownTable(t, tb.file, tb.header)
		seen := map[string]bool{}
		for _, row := range rows {
			if len(row) <= tb.col {
				t.Errorf("%s: short row %q", tb.file, row)
				continue
			}
			for _, name := range strings.Split(row[0], ",") {
				name = strings.Trim(strings.TrimSpace(name), "`")
				s, ok := Lookup(name)
				if !ok {
					t.Errorf("%s: unknown provider %q", tb.file, name)
					continue
				}
				seen[name] = true
				d, want := s.Defaults(), ""
				if tb.window {
					want = "—"
					if d.RetryWindow > 0 {
						want = shortDuration(d.RetryWindow)
					}
				} else {
					want = shortDuration(d.Retention)
				}
				if got := row[tb.col]; got != want {
					t.Errorf("%s (%s), %s: %q, the code says %q", tb.file, tb.header, name, got, want)
				}
			}
		}
		for _, name := range Names() {
			if !seen[name] {
				t.Errorf("%s (%s): no row for %s", tb.file, tb.header, name)
			}
		}
	}
}

// markdownTable returns the cells of the rows of the table whose header row
// starts with header; an escaped \| stays inside its cell.
func markdownTable(t *testing.T, file, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && strings.HasPrefix(line, "| ---"):
		case in && strings.HasPrefix(line, "|"):
			line = strings.ReplaceAll(strings.Trim(line, "|"), `\|`, "\x00")
			var cells []string
			for _, c := range strings.Split(line, "|") {
				cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), "\x00", `\|`))
			}
			rows = append(rows, cells)
		case in:
			return rows
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table with header %q", file, header)
	}
	return rows
}

// shortDuration is d as the tables write it: "168h", "1h25m", "6m", "15s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
