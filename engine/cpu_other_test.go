//go:build !unix

package engine

func processCPU() int64 { return 0 }
