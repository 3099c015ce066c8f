package admin

// Purge: POST /v1/purge deletes finished events updated before a time
// (docs/architecture.md, Event states; docs/operations.md).

import (
	"context"
	"fmt"
	"net/http"
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
		jsonError(w, http.StatusBadRequest, "bad purge request: "+err.Error())
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
	if req.Source != "" && !s.configuredSource(req.Source) && !s.holdsSource(req.Source) {
		// A typo would purge nothing and say so with a 200: say why instead.
		// A source removed from the config keeps its events purgeable.
		jsonError(w, http.StatusNotFound, "unknown source "+req.Source+": not configured and no events stored")
		return
	}
	who := r.Context().Value(whoKey).(string)
	if req.DryRun {
		keys, count, err := s.store.PurgePreview(st, req.Source, before, maxPurgePreview)
		if err != nil {
			jsonError(w, http.StatusInternalServerError, err.Error())
			return
		}
		// keys: the first maxPurgePreview, oldest first.
		writeJSON(w, http.StatusOK, map[string]any{"dry_run": true, "would_purge": count, "keys": nonNil(keys)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	keys, err := s.store.Purge(ctx, st, req.Source, before, who, req.Reason)
	s.log.Info("purge requested", "who", who, "reason", req.Reason, "state", req.State, "source", req.Source,
		"before", before.UTC(), "count", len(keys), "err", err)
	if err != nil {
		writeJSON(w, clusterWriteStatus(err), map[string]any{"error": err.Error(), "purged": len(keys), "keys": nonNil(keys)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": len(keys), "keys": nonNil(keys)})
}

// ParseBefore reads a purge's bound: an RFC 3339 time, or a positive
// duration meaning that long before now ("720h": events last updated over
// 30 days ago), as replay's since takes one.
func ParseBefore(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("before %q: a duration must be positive (that long ago)", v)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("before must be an RFC 3339 time or a duration like 720h, got %q", v)
	}
	return t, nil
}

// holdsSource reports whether the store holds any event of source.
func (s *Server) holdsSource(source string) bool {
	_, bySource, err := s.store.Counts()
	return err != nil || bySource[source] > 0 // unsure: let the purge say
}
