package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"oncehook/cluster"
	"oncehook/engine"
)

// Pausing a source: POST /v1/sources/{name}/pause and .../resume, the
// "sources" of /v1/status, and the dead-letter page's buttons (ui.go).
// A paused source keeps answering its providers; its events wait, in the
// replicated state, until it is resumed (engine.OpPause).

// PauseRequest is the body of POST /v1/sources/{name}/pause and .../resume.
type PauseRequest struct {
	Reason string `json:"reason"`
}

// configuredSource reports whether name is a source of the running config.
func (s *Server) configuredSource(name string) bool {
	for i := range s.cfg().Sources {
		if s.cfg().Sources[i].Name == name {
			return true
		}
	}
	return false
}

func (s *Server) adminPause(w http.ResponseWriter, r *http.Request) {
	s.adminPauseResume(w, r, true)
}

func (s *Server) adminResume(w http.ResponseWriter, r *http.Request) {
	s.adminPauseResume(w, r, false)
}

func (s *Server) adminPauseResume(w http.ResponseWriter, r *http.Request, pause bool) {
	name := r.PathValue("name")
	var req PauseRequest
	if err := decodeRequest(w, r, 1<<20, &req); err != nil {
		refuseRequest(w, "bad request: "+err.Error(), err)
		return
	}
	if msg := reasonProblem(req.Reason); msg != "" {
		jsonError(w, http.StatusBadRequest, msg)
		return
	}
	// A source paused and then removed from the config can still be
	// resumed: its events are held either way until it is configured again.
	if !s.configuredSource(name) && (pause || !s.pausedInStore(name)) {
		jsonError(w, http.StatusNotFound, "unknown source "+name)
		return
	}
	who := r.Context().Value(whoKey).(string)
	changed, err := s.setPaused(r.Context(), name, who, req.Reason, pause)
	if err != nil {
		jsonError(w, clusterWriteStatus(err), err.Error())
		return
	}
	// The state keeps who paused and why only while paused: the log is the
	// record of both, and of the resume.
	action := "resume"
	if pause {
		action = "pause"
	}
	s.log.Info("source "+action, "source", name, "who", who, "reason", req.Reason, "changed", changed)
	writeJSON(w, http.StatusOK, map[string]any{"source": name, "paused": pause, "changed": changed})
}

// pausedInStore reports whether the replicated state holds source as paused.
func (s *Server) pausedInStore(source string) bool {
	ps, err := s.store.Sources()
	return err == nil && ps[source].Paused
}

// setPaused proposes a pause or a resume of source, from any node.
func (s *Server) setPaused(ctx context.Context, source, who, reason string, pause bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if pause {
		return s.store.Pause(ctx, source, who, reason)
	}
	return s.store.Resume(ctx, source, who, reason)
}

// clusterWriteStatus is the HTTP status of a failed operator write: 503
// when the cluster cannot decide now, 500 otherwise.
func clusterWriteStatus(err error) int {
	if errors.Is(err, cluster.ErrNoLeader) || errors.Is(err, cluster.ErrIndeterminate) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// sourceStatusJSON is one source in /v1/status.
type sourceStatusJSON struct {
	Events           int     `json:"events"` // events stored, every state
	Paused           bool    `json:"paused"`
	Since            string  `json:"since,omitempty"`
	By               string  `json:"by,omitempty"`
	Reason           string  `json:"reason,omitempty"`
	Backlog          int     `json:"backlog"` // pending events
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	// Unconfigured: the running config has no such source (a reload
	// removed or renamed it); its pending events are held until it is
	// configured again.
	Unconfigured bool `json:"unconfigured,omitempty"`
}

// sourceStatus is the pause state and backlog of every configured source
// (and of any other source that still has events stored or is paused), from
// this node's applied state.
type sourceStatus struct {
	paused  map[string]engine.SourceState
	backlog map[string]engine.Backlog
}

func (s *Server) sourceStatus() (sourceStatus, error) {
	var ss sourceStatus
	var err error
	if ss.paused, err = s.store.Sources(); err != nil {
		return ss, err
	}
	ss.backlog, err = s.store.Backlog()
	return ss, err
}

// oldestAge is how long the source's oldest pending event has been due, in
// seconds (0 when none is, or it is not due yet).
func (s sourceStatus) oldestAge(name string, now time.Time) float64 {
	b := s.backlog[name]
	if b.Pending == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, b.OldestPendingAt)).Seconds())
}

// pausedFor is how long the source has been paused (0 when it is not).
func (s sourceStatus) pausedFor(name string, now time.Time) float64 {
	p, ok := s.paused[name]
	if !ok {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, p.Since)).Seconds())
}

func (s *Server) statusSources(bySource map[string]int) (map[string]sourceStatusJSON, error) {
	ss, err := s.sourceStatus()
	if err != nil {
		return nil, err
	}
	out := map[string]sourceStatusJSON{}
	now := time.Now()
	add := func(name string) {
		p := ss.paused[name]
		out[name] = sourceStatusJSON{
			Events: bySource[name], Paused: p.Paused, Since: ts(p.Since), By: p.Who, Reason: p.Reason,
			Backlog: ss.backlog[name].Pending, OldestPendingAge: ss.oldestAge(name, now),
			Unconfigured: !s.configuredSource(name),
		}
	}
	for _, src := range s.cfg().Sources {
		add(src.Name)
	}
	for name := range bySource {
		add(name)
	}
	for name := range ss.paused {
		add(name)
	}
	return out, nil
}
