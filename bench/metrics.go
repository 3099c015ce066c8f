package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// backlogScraper reads the source's oncehook_backlog from a node's /metrics
// (admin listener, no token) once a second while a run lasts: the node's own
// count of pending events, beside the claimed-minus-delivered count bench
// computes. A scrape walks the pending events (docs/operations.md, "Metrics"), so its
// cost grows with the backlog it reports; open-model runs only.
type backlogScraper struct {
	stopc chan struct{}
	done  chan struct{}

	mu   sync.Mutex // guards vals
	vals map[int]int64
}

// startBacklogScraper scrapes adminURL/metrics every second, counting
// seconds from start, until stop. A failed scrape leaves its second empty.
func startBacklogScraper(ctx context.Context, adminURL, source string, start time.Time) *backlogScraper {
	s := &backlogScraper{stopc: make(chan struct{}), done: make(chan struct{}), vals: make(map[int]int64)}
	c := &http.Client{Timeout: 900 * time.Millisecond}
	go func() {
		defer close(s.done)
		defer c.CloseIdleConnections()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stopc:
				return
			case <-t.C:
			}
			if v, ok := scrapeBacklog(ctx, c, adminURL+"/metrics", source); ok {
				sec := int(time.Since(start) / time.Second)
				s.mu.Lock()
				s.vals[sec] = v
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// stop ends the scraper and returns what it read, by second; nil when s is nil.
func (s *backlogScraper) stop() map[int]int64 {
	if s == nil {
		return nil
	}
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals
}

func scrapeBacklog(ctx context.Context, c *http.Client, url, source string) (int64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return 0, false
	}
	return parseBacklogMetric(resp.Body, source)
}

// parseBacklogMetric finds oncehook_backlog{source="<source>"} in a
// Prometheus text exposition.
func parseBacklogMetric(r io.Reader, source string) (int64, bool) {
	want := []byte(`source="` + source + `"`)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		rest, ok := bytes.CutPrefix(line, []byte("oncehook_backlog{"))
		if !ok {
			continue
		}
		labels, value, ok := bytes.Cut(rest, []byte("} "))
		if !ok || !bytes.Contains(labels, want) {
			continue
		}
		fields := strings.Fields(string(value)) // value, then an optional timestamp
		if len(fields) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}
