package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Ready reports whether GET url (a node's /readyz) answers 200 through c.
func Ready(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// FetchStatus reads GET adminURL/v1/status with the admin token through c.
func FetchStatus(ctx context.Context, c *http.Client, adminURL, token string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/v1/status", nil)
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("status of %s: %w", adminURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return st, fmt.Errorf("status of %s: %s", adminURL, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("status of %s: %w", adminURL, err)
	}
	return st, nil
}

// AgreedLeader is the index of the node that says it leads and that a
// majority of sts (itself included) names as leader, or -1. A nil entry is a
// node that did not answer.
func AgreedLeader(sts []*Status) int {
	for i, st := range sts {
		if st == nil || st.State != "leader" {
			continue
		}
		agree := 0
		for _, o := range sts {
			if o != nil && o.LeaderID == st.NodeID {
				agree++
			}
		}
		if agree > len(sts)/2 {
			return i
		}
	}
	return -1
}
