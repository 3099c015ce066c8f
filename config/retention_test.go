package config

import (
	"testing"
	"time"
)

// TestRetentionDefaults: dead_retention defaults to 720h; payload_retention
// to 72h, or the source's retention when that is shorter; both can be set.
func TestRetentionDefaults(t *testing.T) {
	tests := []struct {
		name          string
		extra         string
		dead, payload time.Duration
	}{
		{"stripe defaults", "", 720 * time.Hour, 72 * time.Hour},
		{"short retention caps the payload's", `retention = "24h"`, 720 * time.Hour, 24 * time.Hour},
		{"set", "dead_retention = \"48h\"\npayload_retention = \"1h\"", 48 * time.Hour, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.extra, "")
			if time.Duration(s.DeadRetention) != tt.dead || time.Duration(s.PayloadRetention) != tt.payload {
				t.Errorf("dead_retention %s, payload_retention %s; want %s, %s", s.DeadRetention, s.PayloadRetention, tt.dead, tt.payload)
			}
		})
	}
}
