// Command chaoshandler is the instrumented handler of the chaos tests: the
// local service oncehook forwards events to. It runs as its own process (the
// test starts it inside the client network namespace and may SIGSTOP it) and
// appends one JSON line per run to its log, which the test reads back after
// SIGTERM:
//
//	{"key","node","attempt","token","start","end","outcome","status"}
//
// start and end are wall-clock Unix nanoseconds (the test runs on the same
// machine). outcome is
//
//	ok        the effect was applied under the run's token and 200 answered
//	fail      an injected failure (first attempt of some keys): 500 answered
//	fenced    a newer token had already been seen for the key: the effect was
//	          refused (what a fencing-aware store does) and 409 answered
//	abandoned the caller had gone away (its forward_timeout fired) before the
//	          effect: nothing applied, nothing answered
//
// The handler keeps, per key, the highest token it has seen, like a store that
// rejects writes carrying an older fencing token (README "What your handler
// receives"). abandoned_late marks an ok or fenced run whose caller had already
// gone when it answered: a late completion oncehook never saw.
//
// GET /control?slow=DURATION makes every run take that long (0 restores the
// normal work time); GET /stats answers counters. Both are for the test only.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type run struct {
	Key      string `json:"key"`
	Node     string `json:"node"`
	Attempt  int    `json:"attempt"`
	Token    uint64 `json:"token"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
	Outcome  string `json:"outcome"`
	Status   int    `json:"status"`
	Late     bool   `json:"abandoned_late,omitempty"`
	MaxToken uint64 `json:"max_token_seen"`
}

type keyState struct {
	maxToken uint64
	effects  int
}

type handler struct {
	mu      sync.Mutex
	keys    map[string]*keyState
	out     *bufio.Writer
	f       *os.File
	nodes   map[string]string // remote IP -> node id
	failMod uint32
	slowMod uint32
	work    time.Duration
	slowFor time.Duration
	slow    atomic.Int64 // ns; > 0 overrides work for every run
	runs    atomic.Int64
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	logPath := flag.String("log", "runs.jsonl", "append-only run log")
	nodes := flag.String("nodes", "", "ip=node,... to name callers")
	failMod := flag.Uint("fail-mod", 25, "fail attempt 1 of keys whose hash % N == 0 (0: never)")
	slowMod := flag.Uint("slow-mod", 50, "keys whose hash % N == 1 take -slow-for (0: never)")
	work := flag.Duration("work", 2*time.Millisecond, "time one run takes")
	slowFor := flag.Duration("slow-for", 400*time.Millisecond, "time a slow key's run takes")
	flag.Parse()

	f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	h := &handler{keys: map[string]*keyState{}, out: bufio.NewWriterSize(f, 1<<16), f: f,
		nodes: map[string]string{}, failMod: uint32(*failMod), slowMod: uint32(*slowMod), work: *work, slowFor: *slowFor}
	for _, kv := range strings.Split(*nodes, ",") {
		if ip, id, ok := strings.Cut(kv, "="); ok {
			h.nodes[ip] = id
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	// Flush the log now and then so that a test reading it mid-run sees most runs.
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			h.mu.Lock()
			h.out.Flush()
			h.mu.Unlock()
		}
	}()
	fmt.Println("chaoshandler listening on", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ln.Close()
	h.mu.Lock()
	h.out.Flush()
	h.f.Sync()
	h.f.Close()
	h.mu.Unlock()
	os.Exit(0)
}

func hash(key string) uint32 {
	f := fnv.New32a()
	f.Write([]byte(key))
	return f.Sum32()
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/control":
		d, _ := time.ParseDuration(r.URL.Query().Get("slow"))
		h.slow.Store(int64(d))
		fmt.Fprintln(w, "ok")
		return
	case "/stats":
		fmt.Fprintf(w, "{\"runs\":%d}\n", h.runs.Load())
		return
	}
	start := time.Now()
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	rn := run{Key: key, Start: start.UnixNano()}
	rn.Attempt, _ = strconv.Atoi(r.Header.Get("Oncehook-Attempt"))
	rn.Token, _ = strconv.ParseUint(r.Header.Get("Oncehook-Fencing-Token"), 10, 64)
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	rn.Node = h.nodes[ip]
	if rn.Node == "" {
		rn.Node = ip
	}
	hk := hash(key)

	// Seeing a token is the start of the run: a store would take its fencing
	// token when the work begins.
	h.mu.Lock()
	ks := h.keys[key]
	if ks == nil {
		ks = &keyState{}
		h.keys[key] = ks
	}
	if rn.Token > ks.maxToken {
		ks.maxToken = rn.Token
	}
	h.mu.Unlock()

	d := h.work
	if s := h.slow.Load(); s > 0 {
		d = time.Duration(s)
	} else if h.slowMod > 0 && hk%h.slowMod == 1 {
		d = h.slowFor
	}
	time.Sleep(d)

	status := 200
	h.mu.Lock()
	switch {
	case h.failMod > 0 && hk%h.failMod == 0 && rn.Attempt == 1:
		rn.Outcome, status = "fail", 500
	case ks.maxToken > rn.Token:
		rn.Outcome, status = "fenced", 409
	default:
		rn.Outcome = "ok"
		ks.effects++
	}
	rn.MaxToken = ks.maxToken
	h.mu.Unlock()
	if r.Context().Err() != nil {
		// The caller gave up (forward_timeout): oncehook never sees this answer.
		rn.Late = true
		if rn.Outcome == "fail" {
			rn.Outcome = "abandoned"
		}
	}
	w.WriteHeader(status)
	rn.Status = status
	rn.End = time.Now().UnixNano()
	b, _ := json.Marshal(rn)
	h.mu.Lock()
	h.out.Write(b)
	h.out.WriteByte('\n')
	h.mu.Unlock()
	h.runs.Add(1)
}
