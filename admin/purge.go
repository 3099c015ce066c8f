package admin

// Purge: POST /v1/purge deletes finished events updated before a time
// (docs/architecture.md, Event states; docs/operations.md).

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"oncehook/engine"
)

// PurgeRequest is the body of POST /v1/purge.
type PurgeRequest struct {
	State  string `json:"state"`  // dead, done or stale
	Source string `json:"source"` // "": every source
	Before string `json:"before"` // RFC 3339: events updated before this time
	Reason string `json:"reason"` // required; logged with who
	DryRun bool   `json:"dry_run"`
}

// maxPurgePreview bounds the keys a dry run lists.
const maxPurgePreview = engine.MaxListLimit

func (s *Server) adminPurge(w http.ResponseWriter, r *http.Request) {
	var req PurgeRequest
	if err := decodeRequest(w, r, 1<<20, &req); err != nil {
		refuseRequest(w, "bad purge request: "+err.Error(), err)
		return
	}
	if msg := reasonProblem(req.Reason); msg != "" {
		jsonError(w, http.StatusBadRequest, msg)
		return
	}
	st, ok := engine.ParseState(req.State)
	switch {
	case !ok:
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q: want dead, done or stale", req.State))
		return
	case st == engine.StatePending || st == engine.StateProcessing:
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("%s events are in flight (not yet delivered) and cannot be purged; purge takes dead, done or stale", req.State))
		return
	}
	before, err := ParseBefore(req.Before, time.Now())
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.refuseUnknownSource(w, req.Source) {
		return
	}
	who := r.Context().Value(whoKey).(string)
	// Done events still within their retention are keys a provider may
	// send again; purged, a resend is a new event and is delivered again.
	// The answer says how many, before (dry run) and after: counted here
	// before the purge, on this node's applied state and clock (a follower
	// a moment behind may count a few less).
	retained := 0
	if st == engine.StateDone {
		if retained, err = s.store.PurgeRetained(st, req.Source, before, time.Now()); err != nil {
			jsonError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	if req.DryRun {
		keys, count, err := s.store.PurgePreview(st, req.Source, before, maxPurgePreview)
		if err != nil {
			jsonError(w, http.StatusInternalServerError, err.Error())
			return
		}
		// keys: the first maxPurgePreview, oldest first.
		ans := map[string]any{"dry_run": true, "would_purge": count, "keys": nonNil(keys)}
		warnRetained(ans, min(retained, count), "would be")
		writeJSON(w, http.StatusOK, ans)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	keys, err := s.store.Purge(ctx, st, req.Source, before, who, req.Reason)
	s.log.Info("purge requested", "who", who, "reason", req.Reason, "state", req.State, "source", req.Source,
		"before", before.UTC(), "count", len(keys), "err", err)
	// keys: the first maxPurgePreview deleted, as a dry run names them; a
	// purge of millions would otherwise answer tens of megabytes.
	shown := nonNil(keys[:min(len(keys), maxPurgePreview)])
	ans := map[string]any{"purged": len(keys), "keys": shown}
	warnRetained(ans, min(retained, len(keys)), "were")
	if err != nil {
		ans["error"] = err.Error()
		writeJSON(w, clusterWriteStatus(err), ans)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

// warnRetained adds to a purge's answer how many of its done events were
// still within their source's retention, and what that means, when any.
func warnRetained(ans map[string]any, n int, were string) {
	if n == 0 {
		return
	}
	ans["within_retention"] = n
	ans["warning"] = fmt.Sprintf("%d of these done events %s purged within their source's retention: "+
		"their provider may still send them again, and a resend after the purge is a new event, delivered again", n, were)
}

// ParseBefore reads a purge's bound: an RFC 3339 time, or a positive
// duration meaning that long before now ("720h": events last updated over
// 30 days ago), as replay's since takes one. A time ahead of now is refused:
// it would take every event of the state, those finished a moment ago too,
// and is more likely a mistyped year than meant.
func ParseBefore(v string, now time.Time) (time.Time, error) {
	t, err := parseBound("before", v, now)
	if err != nil {
		return time.Time{}, err
	}
	if t.After(now.Add(maxAhead)) {
		return time.Time{}, fmt.Errorf("before %q is ahead of this node's clock (%s): it would purge every event of the state; give a past time or a duration back from now (\"1s\" for all)",
			v, now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// CheckBefore reports what ParseBefore would refuse in v but the clock: a
// client checks a purge's bound before it sends it, and leaves the
// comparison with the node's clock to the node (its own may differ).
func CheckBefore(v string) error {
	_, err := parseBound("before", v, time.Now())
	return err
}

// CheckSince is CheckBefore for a replay's since.
func CheckSince(v string) error {
	_, err := parseBound("since", v, time.Now())
	return err
}

// maxAhead is how far ahead of the node's clock a purge's bound may be: the
// clock skew between an operator's machine and the node.
const maxAhead = time.Minute

// Bounds of a time a purge or replay may name: event times are unix
// nanoseconds, which hold 1678 to 2262 only (time.Time.UnixNano wraps
// outside), and no event is older than 1970.
var (
	minBound = time.Unix(0, 0)
	maxBound = time.Unix(0, math.MaxInt64)
)

// parseBound reads a purge's before or a replay's since: an RFC 3339 time
// between 1970 and 2262, or a positive duration meaning that long before
// now (at most back to 1970). A time outside is refused rather than
// wrapped: as unix nanoseconds 1026 is 2196.
func parseBound(name, v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%s %q: a duration must be positive (that long ago)", name, v)
		}
		if t := now.Add(-d); t.After(minBound) {
			return t, nil
		}
		return minBound, nil // older than any event
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		if durationShaped(v) {
			return time.Time{}, fmt.Errorf("%s %q: not a duration this node can hold (at most 2562047h)", name, v)
		}
		return time.Time{}, fmt.Errorf("%s must be an RFC 3339 time or a duration like 720h, got %q", name, v)
	}
	if t.Before(minBound) || t.After(maxBound) {
		return time.Time{}, fmt.Errorf("%s %q: out of range: a time between 1970 and 2262", name, v)
	}
	return t, nil
}

// durationShaped reports whether v looks like a Go duration ("9999999h")
// that time.ParseDuration refused, as one too long for it.
func durationShaped(v string) bool {
	v = strings.TrimLeft(v, "+-")
	digits := len(v) - len(strings.TrimLeft(v, "0123456789."))
	if digits == 0 || digits == len(v) {
		return false
	}
	for _, c := range v[digits:] {
		if !strings.ContainsRune("0123456789.nsuµmh", c) {
			return false
		}
	}
	return true
}

// holdsSource reports whether the store holds any event of source.
// refuseUnknownSource answers 404 for a source named in a purge, a replay
// or a listing that is neither configured nor holds events, and says whether
// it did: a typo would act on (or list) nothing and say so with a 200. A source removed
// from the config keeps its events reachable.
func (s *Server) refuseUnknownSource(w http.ResponseWriter, source string) bool {
	if source == "" || s.configuredSource(source) || s.holdsSource(source) {
		return false
	}
	jsonError(w, http.StatusNotFound, "unknown source "+source+": not configured and no events stored")
	return true
}

func (s *Server) holdsSource(source string) bool {
	_, bySource, err := s.store.Counts()
	return err != nil || bySource[source] > 0 // unsure: let the purge say
}
