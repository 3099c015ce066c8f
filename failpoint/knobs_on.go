//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
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

// BootID is the machine's boot id as the cluster should see it
// (EnvBootIDFile): the trimmed content of that file, read on every call, and
// true; false when the variable is unset or the file is missing or empty (the
// kernel's boot id then). A test changes the file between two starts of a
// node to simulate a reboot.
func BootID() (string, bool) {
	return bootIDFrom(os.Getenv(EnvBootIDFile))
}

func bootIDFrom(path string) (string, bool) {
	if path == "" {
		return "", false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	id := strings.TrimSpace(string(b))
	return id, id != ""
}
