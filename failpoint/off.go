//go:build !failpoints

package failpoint

import "time"

// Enabled reports whether this build has failpoints. Here it does not: every
// hook is a no-op and Now is the wall clock.
const Enabled = false

// Inject does nothing in a release build.
func Inject(string) {}

// Now is time.Now in a release build.
func Now() time.Time { return time.Now() }
