package main

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// BenchmarkIntake measures the whole hot path on one node over loopback:
// signed 1 KiB deliveries, verify, key, claim through Raft with fsync, 202.
// -cpu sets the client goroutines per core via SetParallelism. cpu-µs/op is
// the whole process's CPU (clients, node and handler) per claim: on a shared
// two-core machine it varies less from run to run than claims/s.
func BenchmarkIntake(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchIntake(b, clients, false) })
	}
	b.Run("duplicates/clients=64", func(b *testing.B) { benchIntake(b, 64, true) })
}

func benchIntake(b *testing.B, clients int, dup bool) {
	h := newHandler(b)
	// A source with neither ordering nor a JSON key: the plain hot path.
	tn := startNodeWithSources(b, "", h.url, `
[[source]]
name = "plain"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/plain"
`)
	tn.n.level.Set(slog.LevelWarn)
	s, _ := providers.Lookup("standard")
	pad := make([]byte, 1024-64)
	for i := range pad {
		pad[i] = 'x'
	}
	hc := &fasthttp.HostClient{Addr: tn.n.httpLn.Addr().String(), MaxConns: clients * 2}
	var seq atomic.Int64
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	if dup {
		// Claim a fixed set first; the timed loop sends only duplicates.
		for i := 0; i < 1024; i++ {
			benchPost(b, hc, tn, s, run, int64(i), pad)
		}
	}
	b.SetParallelism(max(1, clients/2))
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			if dup {
				i %= 1024
			}
			benchPost(b, hc, tn, s, run, i, pad)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time (user and system, every thread) this process
// has used, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchPost(b *testing.B, hc *fasthttp.HostClient, tn *testNode, s providers.Scheme, run string, i int64, pad []byte) {
	id := fmt.Sprintf("b%s_%d", run, i)
	body := []byte(fmt.Sprintf(`{"id":%q,"pad":"%s"}`, id, pad))
	hs, _ := s.Sign(body, []byte(tn.secret), time.Now(), id, nil)
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI("http://bench/in/plain")
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	req.SetBody(body)
	if err := hc.Do(req, resp); err != nil {
		b.Error(err)
	} else if c := resp.StatusCode(); c != 202 && c != 200 {
		b.Errorf("status %d: %s", c, resp.Body())
	}
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
}
