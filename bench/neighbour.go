package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"oncehook/providers"
)

// A noisy neighbour (-neighbour N): a second source on the spawned nodes,
// whose handler (a sink of its own) answers -neighbour-delay after each
// delivery, gets N events just before the load starts. Its backlog competes
// with the measured source for the leader's delivery workers; the report's
// delivery latency after the 2xx shows what that costs the measured source
// (docs/operations.md, "Sharing the workers").

// neighbourSource is the second source's name.
const neighbourSource = "neighbour"

// neighbourSinkFor starts the neighbour's sink when o asks for one.
func neighbourSinkFor(o *options) (*sink, error) {
	if o.neighbour <= 0 {
		return nil, nil
	}
	return startSink("127.0.0.1:0", o.neighbourDelay)
}

// sendNeighbour posts o.neighbour signed events to the neighbour source,
// spread over the nodes, 32 at a time, and returns how many were accepted.
func sendNeighbour(ctx context.Context, o *options, e *env) (int64, error) {
	scheme, ok := providers.Lookup(o.provider)
	if !ok {
		return 0, fmt.Errorf("unknown provider %s", o.provider)
	}
	client := &http.Client{Timeout: o.timeout}
	defer client.CloseIdleConnections()
	run := runID()
	var next, accepted atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(o.neighbour) {
					return
				}
				id := fmt.Sprintf("nb_%s_%d", run, i)
				body := fmt.Sprintf(`{"id":%q,"type":"neighbour.event","data":{"n":%d}}`, id, i)
				err := postSigned(ctx, client, scheme, e, int(i)%len(e.targets), id, body)
				if err == nil {
					accepted.Add(1)
					continue
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return accepted.Load(), fmt.Errorf("-neighbour: %w", firstErr)
	}
	return accepted.Load(), ctx.Err()
}

// postSigned signs body as the provider would and posts it to the neighbour
// source on target i; anything but 202 is an error.
func postSigned(ctx context.Context, client *http.Client, scheme providers.Scheme, e *env, i int, id, body string) error {
	hdrs, err := scheme.Sign([]byte(body), e.secret, time.Now(), id, nil)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.targets[i]+"/in/"+neighbourSource, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hdrs {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("event %s answered %d", id, resp.StatusCode)
	}
	return nil
}
