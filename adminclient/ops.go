package adminclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"oncehook/admin"
)

// The client commands' calls: one admin API request each, its answer
// printed to w as `oncehook status`, `events`, `replay` and the others print
// it (docs/reference.md).

// Status prints GET /v1/status: the node's line, the members, the event
// counts and the sources, or with asJSON the answer as it came.
func (c *Client) Status(ctx context.Context, w io.Writer, asJSON bool) error {
	ctx, cancel := context.WithTimeout(ctx, StatusWait)
	defer cancel()
	var raw json.RawMessage
	if err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &raw); err != nil {
		return statusWaitError(ctx, err)
	}
	var st statusAnswer
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("GET /v1/status: %w", err)
	}
	if asJSON {
		if err := printAnswer(w, raw); err != nil {
			return err
		}
	} else {
		printStatus(w, &st)
	}
	if why := notHealthy(&st); why != "" {
		return ErrNotHealthy{why}
	}
	return nil
}

// ErrNotHealthy is a status answer that says this node cannot serve, or
// that a member did not answer or has no leader: status prints the answer
// and fails, so that a script or a check can tell.
type ErrNotHealthy struct{ Why string }

func (e ErrNotHealthy) Error() string { return "not healthy: " + e.Why }

// notHealthy says why a status answer is not that of a healthy cluster, ""
// when it is.
func notHealthy(st *statusAnswer) string {
	var why []string
	if !st.Ready {
		why = append(why, "this node is not ready ("+st.ReadyWhy+")")
	}
	for _, m := range st.Nodes {
		switch {
		case m.ID == st.NodeID:
		case m.Error != "":
			why = append(why, "member "+m.ID+" did not answer")
		case m.Role == "candidate":
			why = append(why, "member "+m.ID+" has no leader")
		}
	}
	return strings.Join(why, "; ")
}

// StatusWait bounds status and peers: a node answers them within a few
// seconds (it asks each member for 2 s at most), so a longer silence is a
// node that is stopped (SIGSTOP), frozen or unreachable, which the operator
// should learn now rather than after the 60 s other commands may need.
var StatusWait = 15 * time.Second

// statusWaitError says what a status request that ran out of StatusWait
// means.
func statusWaitError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (no answer within %s: the node may be stopped, frozen or busy (installing a large snapshot); ask another member)", err, StatusWait)
	}
	return err
}

// EventsQuery selects the events GET /v1/events lists; empty fields do not
// filter.
type EventsQuery struct {
	State, Source string
	Limit         int
	After         string // the cursor a previous page printed
}

// Events prints one page of GET /v1/events as a table (or JSON), and on
// stderr the -after that fetches the next page, if any.
func (c *Client) Events(ctx context.Context, stdout, stderr io.Writer, eq EventsQuery, asJSON bool) error {
	q := url.Values{}
	if eq.State != "" {
		q.Set("state", eq.State)
	}
	if eq.Source != "" {
		q.Set("source", eq.Source)
	}
	q.Set("limit", fmt.Sprint(eq.Limit))
	if eq.After != "" {
		q.Set("after", eq.After)
	}
	var out struct {
		Events []admin.Event `json:"events"`
		Next   string        `json:"next"`
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &out); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// The column shows the event's last_error, named for that field: its
	// last failure (which stays on an event delivered after it), or why an
	// event that never failed was handed back without a delivery.
	fmt.Fprintln(tw, "KEY\tSTATE\tATTEMPTS\tSTEP\tUPDATED\tLAST ERROR")
	for _, e := range out.Events {
		step := e.Step
		if step == "" {
			step = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", e.Key, e.State, e.Attempts, cell(step), e.UpdatedAt, cell(e.LastError))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Events) == 0 {
		// On stderr: a script reading the table sees only its header.
		fmt.Fprintf(stderr, "no events%s\n", eventsFilter(eq))
	}
	if out.Next != "" {
		// The cursor is an event key, which the sender chose: quoted for a
		// shell, so that pasting the line runs nothing it holds.
		fmt.Fprintf(stderr, "more events: add -after %s\n", shellQuote(out.Next))
	}
	return nil
}

// eventsFilter says what an events query selected, for "no events".
func eventsFilter(eq EventsQuery) string {
	var f []string
	if eq.State != "" {
		f = append(f, "in state "+eq.State)
	}
	if eq.Source != "" {
		f = append(f, "of source "+eq.Source)
	}
	if eq.After != "" {
		f = append(f, "after "+shellQuote(eq.After))
	}
	if len(f) == 0 {
		return ""
	}
	return " " + strings.Join(f, ", ")
}

// ShowEvent prints GET /v1/events/{key} as it came; with body, its headers,
// cached response and payload too.
func (c *Client) ShowEvent(ctx context.Context, w io.Writer, key string, body bool) error {
	path := "/v1/events/" + url.PathEscape(key)
	if body {
		path += "?body=1"
	}
	var ev json.RawMessage
	if err := c.Do(ctx, http.MethodGet, path, nil, &ev); err != nil {
		return err
	}
	return printAnswer(w, ev)
}

// Replay posts req to /v1/replay and prints the answer. Events the node
// did not replay (the answer's "skipped", of keys or by state; a replay by
// state lists the first 1000 and counts them all in "skipped_count") make
// it an error, after the answer is printed: a script must not take a
// partial replay for a whole one. So does a dry run that finds events the
// replay would skip: its exit status is the replay's.
func (c *Client) Replay(ctx context.Context, w io.Writer, req admin.ReplayRequest) error {
	var out json.RawMessage
	if err := c.Do(ctx, http.MethodPost, "/v1/replay", req, &out); err != nil {
		// A replay of keys that found no leader, or whose outcome is not
		// known, names each key and what may have happened to it: printed,
		// so that the operator does not replay again a key that took.
		var ae *AnswerError
		if errors.As(err, &ae) {
			var partial struct {
				Skipped []admin.ReplaySkip `json:"skipped"`
			}
			if json.Unmarshal(ae.Body, &partial) == nil && len(partial.Skipped) > 0 {
				if perr := printAnswer(w, ae.Body); perr != nil {
					return perr
				}
			}
		}
		return err
	}
	if err := printAnswer(w, out); err != nil {
		return err
	}
	var ans struct {
		DryRun       bool               `json:"dry_run"`
		Skipped      []admin.ReplaySkip `json:"skipped"`
		SkippedCount int                `json:"skipped_count"` // absent from an older node's answer
	}
	if err := json.Unmarshal(out, &ans); err != nil {
		return fmt.Errorf("admin API answer: %w", err)
	}
	n := max(ans.SkippedCount, len(ans.Skipped))
	switch {
	case n > 0 && ans.DryRun:
		return fmt.Errorf("%d of the keys would not be replayed (see skipped)", n)
	case n > 0:
		return fmt.Errorf("%d of the keys not replayed (see skipped)", n)
	}
	return nil
}

// Purge posts req to /v1/purge and prints the answer. A purge that failed
// part way (the leader lost, the outcome of its last command unknown) is
// an error that still names what was deleted: that answer is printed too,
// so the operator learns which events are gone.
func (c *Client) Purge(ctx context.Context, w io.Writer, req admin.PurgeRequest) error {
	// The node gives a purge a minute: the client's own timeout would end
	// the wait just as a purge cut short by it answers what it deleted.
	c.http.Timeout = 0
	err := c.post(ctx, w, "/v1/purge", req)
	var ae *AnswerError
	if errors.As(err, &ae) {
		var partial struct {
			Purged int `json:"purged"`
		}
		if json.Unmarshal(ae.Body, &partial) == nil && partial.Purged > 0 {
			if perr := printAnswer(w, ae.Body); perr != nil {
				return perr
			}
		}
	}
	return err
}

// Pause posts to /v1/sources/{source}/pause (or .../resume when pause is
// false) and prints the answer.
func (c *Client) Pause(ctx context.Context, w io.Writer, source, reason string, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	path := "/v1/sources/" + url.PathEscape(source) + "/" + verb
	return c.post(ctx, w, path, admin.PauseRequest{Reason: reason})
}

// post sends req as JSON and prints the answer as it came.
func (c *Client) post(ctx context.Context, w io.Writer, path string, req any) error {
	var out json.RawMessage
	if err := c.Do(ctx, http.MethodPost, path, req, &out); err != nil {
		return err
	}
	return printAnswer(w, out)
}

// ListPeers prints the Raft configuration's members of GET /v1/status.
func (c *Client) ListPeers(ctx context.Context, w io.Writer) error {
	var st struct {
		Nodes    []struct{ ID, Address, Suffrage, State string } `json:"nodes"`
		ReadyWhy string                                          `json:"ready_reason"`
	}
	ctx, cancel := context.WithTimeout(ctx, StatusWait)
	defer cancel()
	if err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return statusWaitError(ctx, err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAddress\tState\tVoter")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", n.ID, orDash(n.Address), n.State, n.Suffrage == "Voter")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if strings.HasPrefix(st.ReadyWhy, "not a member of the cluster configuration") {
		// A removed node keeps the configuration it last knew; the
		// cluster's own is on its members.
		fmt.Fprintf(w, "this node is %s; the list above is the configuration it last knew: ask a member for the cluster's\n", st.ReadyWhy)
	}
	return nil
}

// RemovePeer removes server id from the Raft configuration.
func (c *Client) RemovePeer(ctx context.Context, w io.Writer, id string) error {
	if err := c.Do(ctx, http.MethodDelete, "/v1/cluster/peers/"+url.PathEscape(id), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(w, "removed %s\n", id)
	return nil
}

// TransferLeadership asks the leader to hand leadership to to (any voter
// when "") once its deliveries in flight finished, and prints the new leader.
func (c *Client) TransferLeadership(ctx context.Context, w io.Writer, to string) error {
	var out struct {
		Leader string `json:"leader"`
	}
	// The leader may wait up to 30 s for the target to catch up, then for
	// its deliveries in flight (the longest forward_timeout, at least 10 s):
	// giving up sooner would cut that drain short. The admin server's own
	// write timeout (2 min) bounds the call.
	c.http.Timeout = 3 * time.Minute
	if err := c.Do(ctx, http.MethodPost, "/v1/cluster/leader", map[string]string{"to": to}, &out); err != nil {
		return err
	}
	fmt.Fprintf(w, "leader is now %s\n", out.Leader)
	return nil
}

// backupTrailer ends a whole backup stream with its length (the admin
// package's BackupTrailer; this package does not import the server).
const backupTrailer = "Oncehook-Backup-Bytes"

// wholeBackup checks, once the body is read to its end, that the node said
// the stream was whole: a node announces the trailer and sends it only after
// a backup that completed. A node of a release before the trailer announces
// none, and its stream is taken as it ends.
func wholeBackup(resp *http.Response, n int64) error {
	if _, announced := resp.Trailer[backupTrailer]; !announced {
		return nil
	}
	got := resp.Trailer.Get(backupTrailer)
	if got == "" {
		return fmt.Errorf("the node's backup stream ended without its end mark after %d bytes: the backup failed on the node (its log says why); nothing saved", n)
	}
	if got != strconv.FormatInt(n, 10) {
		return fmt.Errorf("the node sent %d bytes but says the backup is %s: nothing saved", n, got)
	}
	return nil
}

// SaveSnapshot streams GET /v1/backup into file, through file.tmp synced and
// renamed, so that file is a whole backup or not there. It streams for as
// long as the state takes: ctx bounds it, not the client's timeout.
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer, file string) error {
	c.http.Timeout = 0
	// The file is opened first: a path that cannot be written is said so
	// before the node streams a backup into nothing.
	// Lstat: the rename would replace a symbolic link itself, not the
	// file it names.
	fi, statErr := os.Lstat(file)
	replacing := statErr == nil
	switch {
	case replacing && fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("cannot write %s: a symbolic link (give the path it points to)", file)
	case replacing && !fi.Mode().IsRegular():
		return fmt.Errorf("cannot write %s: not a regular file", file)
	}
	f, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".tmp-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	tmp := f.Name()
	resp, err := c.raw(ctx, http.MethodGet, "/v1/backup", nil)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.Close()
		os.Remove(tmp)
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return c.statusError("backup", resp.StatusCode, b)
	}
	n, err := io.Copy(f, resp.Body)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("the stream was cut after %d bytes (the backup failed on the node, whose log says why, or the connection broke); nothing saved", n)
	} else if err == nil {
		err = wholeBackup(resp, n)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot save %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	if replacing {
		fmt.Fprintf(w, "saved %s (%d bytes), replacing the file that was there\n", file, n)
	} else {
		fmt.Fprintf(w, "saved %s (%d bytes)\n", file, n)
	}
	return nil
}

// RestoreSnapshot posts file to /v1/restore. Like SaveSnapshot, ctx bounds
// it, not the client's timeout.
func (c *Client) RestoreSnapshot(ctx context.Context, w io.Writer, file string) error {
	c.http.Timeout = 0
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		// A directory would fail part way through the upload, and the
		// outcome then reads as unknown.
		return fmt.Errorf("cannot restore %s: not a regular file; nothing sent", file)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/restore", f)
	if err != nil {
		return err
	}
	// The length lets the node refuse a backup over admin.max_restore
	// before any of it is sent.
	req.ContentLength = fi.Size()
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Expect", "100-continue")
	resp, err := c.send(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			// No connection, so no byte of it reached a node.
			return fmt.Errorf("%w (nothing sent: no restore)", err)
		}
		// The node may have taken the backup before the connection broke
		// (it stopped, say): only the cluster can tell.
		return fmt.Errorf("%w (whether the restore took is unknown: compare `oncehook status` event counts with the backup's, and run it again if it did not)", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return c.statusError("restore", resp.StatusCode, b)
	}
	// What the cluster now is, since it surprises: the handler gets again
	// what it finished since the backup (docs/operations.md, "Backup and
	// restore").
	fmt.Fprintf(w, "restored %s: the whole cluster is back at the backup. Events claimed since it are forgotten; "+
		"events it holds as pending or processing are delivered, again if they were delivered since (same idempotency key, "+
		"attempts counted from the backup's, a higher fencing token); sources are paused or running as in the backup "+
		"(`oncehook status` lists them)\n", file)
	return nil
}

// shellQuote quotes s for a POSIX shell: as it is when it holds only bytes no
// shell reads specially, else in single quotes, inside which a shell expands
// nothing ($(...), backquotes, $VAR); a single quote itself is closed,
// escaped and reopened.
func shellQuote(s string) string {
	safe := s != ""
	for i := 0; i < len(s) && safe; i++ {
		c := s[i]
		safe = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_-.,:/@%+=", c) >= 0
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
