//go:build !unix

package connlimit

// FDLimit is unknown here.
func FDLimit() int { return 0 }
