package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIntakeConnectionCap: a client network holding node.max_conns_per_ip
// connections gets its next one answered 429 and closed, before any request
// is read; the refusal is counted in oncehook_connections_refused_total and
// the open connections in oncehook_connections_open.
func TestIntakeConnectionCap(t *testing.T) {
	tn, addr := startCappedNode(t, 2)

	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitUntil(t, "two intake connections open", func() bool {
		v, _ := metricValue(tn.scrape(), `oncehook_connections_open{listener="intake"}`)
		return v >= 2
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the third connection got no HTTP answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct{ Status, Error string }
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || json.Unmarshal(body, &answer) != nil || answer.Status != "error" {
		t.Fatalf("third connection: %d %q %s, want 429 with Retry-After and a JSON error", resp.StatusCode, resp.Header, body)
	}
	if v := mustMetric(t, tn.scrape(), `oncehook_connections_refused_total{listener="intake"}`); v != 1 {
		t.Errorf("refused intake connections %v, want 1", v)
	}
	for _, l := range []string{"admin", "cluster"} {
		mustMetric(t, tn.scrape(), `oncehook_connections_refused_total{listener="`+l+`"}`)
	}
}

// TestIntakeCapRefusalsAreAllTheDocumentedOne: a client that keeps opening
// and closing connections at its network's cap is refused only with the
// documented answer (JSON, Retry-After, counted), never with the HTTP
// server's own plain-text 429 (it counted the cap a second time, and
// lagged connlimit when a connection closed).
func TestIntakeCapRefusalsAreAllTheDocumentedOne(t *testing.T) {
	_, addr := startCappedNode(t, 1)
	var mu sync.Mutex
	refused, other := 0, 0
	for range 400 {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprint(c, "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					mu.Lock()
					if resp.Header.Get("Retry-After") != "" && resp.Header.Get("Content-Type") == "application/json" {
						refused++
					} else {
						other++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if other > 0 {
		t.Fatalf("%d refusals were not the documented 429 (%d were)", other, refused)
	}
}

// startCappedNode starts a node whose intake takes at most perNetwork
// connections from one client network (node.max_conns_per_ip), and returns
// it with its intake's address.
func startCappedNode(t *testing.T, perNetwork int) (*testNode, string) {
	t.Helper()
	tn := startTestNode(t, "", newHandler(t).url)
	tn.stop()
	cfg, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tn.cfgPath, strings.Replace(string(cfg), "log_level = \"debug\"\n", fmt.Sprintf("log_level = \"debug\"\nmax_conns_per_ip = %d\n", perNetwork), 1))
	tn.start()
	return tn, strings.TrimPrefix(tn.intake, "http://")
}
