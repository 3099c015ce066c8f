package intake

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestRefuseConn: the answer to a connection over a cap is a complete HTTP
// response a sender can read: 503 over the total, 429 over the client
// network's share, both with Retry-After and the intake's JSON error.
func TestRefuseConn(t *testing.T) {
	for over, want := range map[string]int{"total": http.StatusServiceUnavailable, "network": http.StatusTooManyRequests} {
		server, client := net.Pipe()
		go func() { RefuseConn(server, over); server.Close() }()
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatalf("%s: %v", over, err)
		}
		body, err := io.ReadAll(resp.Body)
		client.Close()
		var answer struct{ Status, Error string }
		if err != nil || resp.StatusCode != want || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || !resp.Close ||
			json.Unmarshal(body, &answer) != nil || answer.Status != "error" || answer.Error == "" {
			t.Errorf("%s: %d %v %q (%v), want %d with Retry-After, nosniff, Connection: close and a JSON error", over, resp.StatusCode, resp.Header, body, err, want)
		}
	}
}
