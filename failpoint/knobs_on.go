//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"time"
)

// The retention knobs, read once at init (EnvBucketWidth, EnvExpireInterval);
// zero: not set.
var bucketWidth, expireInterval time.Duration

func init() {
	var err error
	if bucketWidth, err = knob(EnvBucketWidth, os.Getenv(EnvBucketWidth)); err == nil {
		expireInterval, err = knob(EnvExpireInterval, os.Getenv(EnvExpireInterval))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "failpoint: %v\n", err)
		os.Exit(2)
	}
	if bucketWidth > 0 {
		fmt.Fprintf(os.Stderr, "failpoint: test bucket width %s\n", bucketWidth)
	}
	if expireInterval > 0 {
		fmt.Fprintf(os.Stderr, "failpoint: test expire interval %s\n", expireInterval)
	}
}

// knob reads a duration knob: empty is zero (not set); otherwise a positive
// Go duration.
func knob(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 1s", name, v)
	}
	return d, nil
}

// BucketWidth is the retention bucket width an engine file created by this
// process gets (EnvBucketWidth); zero: the engine's default.
func BucketWidth() time.Duration { return bucketWidth }

// ExpireInterval is how often the leader's sweeper expires ended retention
// buckets (EnvExpireInterval); zero: the forwarder's default.
func ExpireInterval() time.Duration { return expireInterval }
