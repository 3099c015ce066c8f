package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// sink is the reference local handler: it logs one line per delivery and
// counts deliveries and distinct keys, so a user can see exactly-once at work.
type sink struct {
	out    io.Writer
	quiet  bool
	status int

	mu         sync.Mutex
	deliveries int
	keys       map[string]int
}

func newSink(out io.Writer, quiet bool, status int) *sink {
	return &sink{out: out, quiet: quiet, status: status, keys: make(map[string]int)}
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		s.mu.Lock()
		st := map[string]int{"deliveries": s.deliveries, "unique_keys": len(s.keys)}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
		return
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	key := r.Header.Get("Oncehook-Event-Key")
	if r.Method != http.MethodPost || key == "" {
		// Not a delivery (a browser, a health check): not counted.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintln(w, `{"ok":false,"error":"not an oncehook delivery: POST with Oncehook-Event-Key"}`)
		return
	}
	s.mu.Lock()
	s.deliveries++
	s.keys[key]++
	seen := s.keys[key]
	s.mu.Unlock()
	if !s.quiet {
		fmt.Fprintf(s.out, "%s delivery key=%q source=%s attempt=%s token=%s bytes=%d times_seen=%d\n",
			time.Now().Format(time.RFC3339Nano), key, r.Header.Get("Oncehook-Source"),
			r.Header.Get("Oncehook-Attempt"), r.Header.Get("Oncehook-Fencing-Token"), n, seen)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(s.status)
	fmt.Fprintf(w, "{\"ok\":%t}\n", s.status/100 == 2)
}

func cmdSink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sink", stdout, stderr)
	listen := fs.String("listen", "127.0.0.1:9000", "address to listen on")
	status := fs.Int("status", 200, "status code to answer every delivery with")
	quiet := fs.Bool("quiet", false, "do not log each delivery")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	if *status < 200 || *status > 599 {
		// 1xx is no final answer (net/http panics on some), and no sender
		// means anything by a status past 599.
		return usageError{fmt.Sprintf("sink -status %d: want a final HTTP status, 200-599", *status)}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("sink listen: %w", err)
	}
	srv := &http.Server{Handler: newSink(stdout, *quiet, *status), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "sink listening on http://%s (GET /stats for counts)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
