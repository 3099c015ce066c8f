//go:build !failpoints

package failpoint

import "time"

// BucketWidth is zero in a release build: an engine file gets the engine's
// default width.
func BucketWidth() time.Duration { return 0 }

// ExpireInterval is zero in a release build: the forwarder's default.
func ExpireInterval() time.Duration { return 0 }

// BootID is never overridden in a release build: the cluster reads the
// kernel's boot id.
func BootID() (string, bool) { return "", false }
