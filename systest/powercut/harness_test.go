package powercut

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/failpoint"
	"oncehook/internal/powercut"
	"oncehook/internal/testcluster"
	"oncehook/internal/testproc"
	"oncehook/providers"
)

// rebuildLog is what cluster logs when it does not trust an engine file
// (cluster/node.go, open).
const rebuildLog = "rebuilding it from the newest snapshot and the raft log"

// node is a testcluster node whose data dir is a FUSE mount of backing.
type node struct {
	*testcluster.Node
	backing string       // the "disk": the backing directory of the mount
	bootF   string       // the file holding this machine's boot id
	boots   int          // how often the machine booted
	fs      *powercut.FS // the current mount
	outs    []*testcluster.Proc
}

// pcluster is a three-node loopback cluster on FUSE-mounted data dirs.
type pcluster struct {
	t *testing.T
	*testcluster.Cluster
	nodes []*node
	rec   *recorder
}

// startCluster starts three nodes as testcluster does, then moves each data
// dir onto its own FUSE mount: every node is stopped (a clean close), its
// data dir becomes the backing dir of a mount at the same path, and it starts
// again under boot id "boot-1".
func startCluster(t *testing.T) *pcluster {
	t.Helper()
	rec := newRecorder(t)
	c := testcluster.Start(t, testcluster.Options{Bin: binary, Nodes: 3, Handler: rec.url})
	pc := &pcluster{t: t, Cluster: c, rec: rec}
	for _, nd := range c.Nodes {
		c.StopNode(nd)
	}
	for _, nd := range c.Nodes {
		n := &node{Node: nd, backing: nd.Dir + ".disk", bootF: nd.Dir + ".boot"}
		if err := os.Rename(nd.Dir, n.backing); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(nd.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		pc.mount(n)
		pc.boot(n)
		pc.nodes = append(pc.nodes, n)
	}
	for _, n := range pc.nodes {
		pc.start(n)
	}
	for _, n := range pc.nodes {
		c.WaitReady(n.Node)
	}
	return pc
}

// mount mounts n's disk at its data dir; the test's cleanup (or an
// interrupt) unmounts it after the node's process is gone.
func (pc *pcluster) mount(n *node) {
	pc.t.Helper()
	m, err := powercut.Mount(n.backing, n.Dir)
	if err != nil {
		pc.t.Fatal(err)
	}
	n.fs = m
	testproc.Cleanup(pc.t, func() {
		if err := m.Unmount(); err != nil {
			pc.t.Errorf("%s: %v", n.ID, err)
		}
	})
}

// boot gives n's machine a new boot id.
func (pc *pcluster) boot(n *node) {
	pc.t.Helper()
	n.boots++
	if err := os.WriteFile(n.bootF, []byte(fmt.Sprintf("%s-boot-%d\n", n.ID, n.boots)), 0o600); err != nil {
		pc.t.Fatal(err)
	}
}

// start starts n's process with its machine's boot id. The variable is set
// in this process only while the child is started (it inherits the
// environment at exec); the test runs nothing else meanwhile that starts a
// process.
func (pc *pcluster) start(n *node) {
	pc.t.Helper()
	os.Setenv(failpoint.EnvBootIDFile, n.bootF)
	pc.StartNode(n.Node)
	os.Unsetenv(failpoint.EnvBootIDFile)
	n.outs = append(n.outs, n.Proc)
}

func (pc *pcluster) leader() *node {
	l := pc.Leader()
	for _, n := range pc.nodes {
		if n.Node == l {
			return n
		}
	}
	return nil
}

// cutReport is what one power cut measured.
type cutReport struct {
	unsynced    map[string]int           // files with unsynced writes at the cut, per node
	unavailable time.Duration            // from the kill until some node answered a new event 2xx
	catchUp     map[string]time.Duration // from a cut node's start until it was ready
}

// cut is a power cut of victims at once: each process is SIGKILLed, its
// mount loses its unsynced writes (all, or some with a torn cut: o), is
// mounted again, and the machine boots
// with a new boot id; then each node starts again. A probe sends new events
// to the running nodes from the kill on and records how long until one is
// acknowledged (acked). The nodes are ready when cut returns.
func (pc *pcluster) cut(victims []*node, g *load, o powercut.CutOptions) cutReport {
	pc.t.Helper()
	r := cutReport{unsynced: map[string]int{}, catchUp: map[string]time.Duration{}}
	killed := time.Now()
	for _, v := range victims {
		pc.KillNode(v.Node)
	}
	probeDone := make(chan time.Duration, 1)
	go func() { probeDone <- g.probe(killed) }()
	for _, v := range victims {
		r.unsynced[v.ID] = v.fs.Unsynced()
		if err := v.fs.CutWith(o); err != nil {
			pc.t.Fatalf("%s: %v", v.ID, err)
		}
		pc.mount(v)
		pc.boot(v)
	}
	started := map[string]time.Time{}
	for _, v := range victims {
		started[v.ID] = time.Now()
		pc.start(v)
	}
	for _, v := range victims {
		pc.WaitReady(v.Node)
		r.catchUp[v.ID] = time.Since(started[v.ID])
	}
	select {
	case r.unavailable = <-probeDone:
	case <-time.After(2 * time.Minute):
		pc.t.Fatal("no node acknowledged a new event within 2 minutes of the cut")
	}
	return r
}

// recorder is the handler: it records every delivery with the headers
// oncehook sends (forward/doc.go) and answers 200 at once.
type recorder struct {
	mu   sync.Mutex
	runs map[string][]run
	url  string
}

type run struct {
	token      uint64
	attempt    int
	start, end time.Time
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{runs: map[string][]run{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	io.Copy(io.Discard, req.Body)
	tok, _ := strconv.ParseUint(req.Header.Get("Oncehook-Fencing-Token"), 10, 64)
	att, _ := strconv.Atoi(req.Header.Get("Oncehook-Attempt"))
	r.mu.Lock()
	k := req.Header.Get("Idempotency-Key")
	r.runs[k] = append(r.runs[k], run{token: tok, attempt: att, start: start, end: time.Now()})
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs[key])
}

// check returns the fencing violations among each key's deliveries (a token
// not above every earlier one of the key; a delivery that started while an
// earlier one of the key was still running: the handler answers at once, so
// no lease can have expired meanwhile) and the number of redeliveries.
func (r *recorder) check() (violations []string, redeliveries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.runs))
	for k := range r.runs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rs := slices.Clone(r.runs[k])
		slices.SortFunc(rs, func(a, b run) int { return a.start.Compare(b.start) })
		redeliveries += len(rs) - 1
		var maxTok uint64
		var lastEnd time.Time
		for i, x := range rs {
			if i > 0 && x.token <= maxTok {
				violations = append(violations, fmt.Sprintf("%s: delivery %d has token %d, not above %d", k, i+1, x.token, maxTok))
			}
			if i > 0 && x.start.Before(lastEnd) {
				violations = append(violations, fmt.Sprintf("%s: delivery %d (token %d) started while an earlier one still ran", k, i+1, x.token))
			}
			maxTok = max(maxTok, x.token)
			if x.end.After(lastEnd) {
				lastEnd = x.end
			}
		}
	}
	return violations, redeliveries
}

// load sends signed events, each until it is acknowledged, with duplicates,
// spread over the nodes, like a provider that retries.
type load struct {
	pc     *pcluster
	prefix string
	client *http.Client

	mu     sync.Mutex
	acked  map[string]bool // event id -> acknowledged
	sends  int             // requests sent
	probes int
}

func newLoad(pc *pcluster, prefix string) *load {
	return &load{pc: pc, prefix: prefix, acked: map[string]bool{},
		client: &http.Client{Timeout: 10 * time.Second}}
}

// ackedCount is how many distinct events were acknowledged so far.
func (g *load) ackedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.acked)
}

// run sends total events from workers goroutines; event i is sent 1 + i%3
// times (duplicates: one, two or three deliveries of the same id, each until
// acknowledged). It returns when every delivery was acknowledged or ctx ended.
func (g *load) run(ctx context.Context, total, workers int) {
	ids := make(chan int, total)
	for i := 0; i < total; i++ {
		ids <- i
	}
	close(ids)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("%s-%04d", g.prefix, i)
				for d := 0; d <= i%3 && ctx.Err() == nil; d++ {
					g.until(ctx, id, i+d)
				}
			}
		}()
	}
	wg.Wait()
}

// until sends id until a node answers 2xx, starting with node start%3; a
// refused or failed try moves on to the next node after a short pause (a
// bounded retry of a load generator, not a wait for a condition).
func (g *load) until(ctx context.Context, id string, start int) bool {
	for try := 0; ctx.Err() == nil; try++ {
		nd := g.pc.nodes[(start+try)%len(g.pc.nodes)]
		if code := g.send(ctx, nd, id); code/100 == 2 {
			g.mu.Lock()
			g.acked[id] = true
			g.mu.Unlock()
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// probe sends new events, each until acknowledged, from since on, and
// returns how long after since the first was acknowledged.
func (g *load) probe(since time.Time) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g.mu.Lock()
	g.probes++
	id := fmt.Sprintf("%s-probe-%d", g.prefix, g.probes)
	g.mu.Unlock()
	if g.until(ctx, id, 0) {
		return time.Since(since)
	}
	return -1
}

// send posts one signed event (Standard Webhooks) to nd's orders source and
// returns the status; 0 when the request failed.
func (g *load) send(ctx context.Context, nd *node, id string) int {
	g.mu.Lock()
	g.sends++
	g.mu.Unlock()
	body := []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"pad":"%0400d"}`, id, 0))
	s, _ := providers.Lookup("standard")
	hs, err := s.Sign(body, []byte(g.pc.Secret), time.Now(), id, nil)
	if err != nil {
		return 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.Intake+"/in/orders", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// ackedKeys are the scoped keys ("orders:" + id) of every acknowledged event.
func (g *load) ackedKeys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for id := range g.acked {
		out = append(out, "orders:"+id)
	}
	slices.Sort(out)
	return out
}

// event is one event as the admin API lists it.
type event struct {
	Key   string `json:"key"`
	State string `json:"state"`
	Token uint64 `json:"token"`
}

// events lists every event n holds, by key, 1000 a page (paging with the
// last key, as systest/chaos does).
func (pc *pcluster) events(n *node) (map[string]event, error) {
	out := map[string]event{}
	after := ""
	for page := 0; page < 1000; page++ {
		code, b := pc.Get("http://"+n.Admin+"/v1/events?limit=1000&after="+url.QueryEscape(after), true)
		if code != 200 {
			return nil, fmt.Errorf("list events on %s: %d %s", n.ID, code, b)
		}
		var res struct{ Events []event }
		if err := json.Unmarshal(b, &res); err != nil {
			return nil, err
		}
		for _, ev := range res.Events {
			out[ev.Key] = ev
		}
		if len(res.Events) < 1000 {
			return out, nil
		}
		after = res.Events[len(res.Events)-1].Key
	}
	return nil, fmt.Errorf("too many pages on %s", n.ID)
}

// engineView is a node's engine as GET /v1/backup gives it (one read
// transaction): its last applied index, content hash and consistency check.
type engineView struct {
	applied uint64
	hash    [32]byte
	check   error
}

func (pc *pcluster) engineView(n *node) (engineView, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.Admin+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+pc.Token)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return engineView{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return engineView{}, fmt.Errorf("backup of %s: %d", n.ID, resp.StatusCode)
	}
	path := filepath.Join(pc.Root, fmt.Sprintf("backup-%s-%d.db", n.ID, time.Now().UnixNano()))
	defer os.Remove(path)
	f, err := os.Create(path)
	if err != nil {
		return engineView{}, err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return engineView{}, err
	}
	e, err := engine.Open(path, engine.Options{})
	if err != nil {
		return engineView{}, err
	}
	defer e.Close()
	v := engineView{applied: e.LastApplied(), check: e.Check()}
	v.hash, err = e.Hash()
	return v, err
}
