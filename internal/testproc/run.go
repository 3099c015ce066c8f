package testproc

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Prefix starts the name of everything a run makes outside its process: the
// run directory, network namespaces, cgroups. NamePrefix adds the run's PID.
const Prefix = "oncehook-test-"

// NamePrefix is Prefix, this process's PID and a dash: what Sweep reads back
// to tell whether the run that made a thing is still alive.
func NamePrefix() string { return Prefix + strconv.Itoa(os.Getpid()) + "-" }

// RunDir is the directory of one run of a test binary; see Begin.
type RunDir struct {
	dir     string
	oldTmp  string
	hadTmp  bool
	sigs    chan os.Signal
	stopped chan struct{}
}

// Begin starts a run of the test binary (name says which, e.g. "chaos"). It
// sweeps what dead runs left (Sweep; each removal is reported on stderr),
// makes the run directory (Prefix, the PID, name) in the temporary directory
// and points TMPDIR at it, so t.TempDir and the children's temporary files
// are inside it. Until End, SIGINT or SIGTERM kills every child's process
// group, runs every pending Cleanup (newest first), removes the run directory
// and ends the binary with that signal. A `go test -timeout` panic cannot be
// caught: its leftovers wait for the next Sweep.
func Begin(name string) (*RunDir, error) {
	removed, err := Sweep()
	for _, r := range removed {
		fmt.Fprintln(os.Stderr, "testproc: swept a dead run's", r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testproc: sweep:", err)
	}
	dir, err := os.MkdirTemp("", NamePrefix()+name+"-")
	if err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	r := &RunDir{dir: dir, sigs: make(chan os.Signal, 1), stopped: make(chan struct{})}
	r.oldTmp, r.hadTmp = os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	signal.Notify(r.sigs, syscall.SIGINT, syscall.SIGTERM)
	go r.watch()
	return r, nil
}

// Dir is the run directory.
func (r *RunDir) Dir() string { return r.dir }

func (r *RunDir) watch() {
	select {
	case <-r.stopped:
		return
	case sig := <-r.sigs:
		fmt.Fprintf(os.Stderr, "testproc: %v: killing children and cleaning up\n", sig)
		Interrupt()
		os.RemoveAll(r.dir)
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}
}

// End stops the signal handling, restores TMPDIR and removes the run
// directory. Call it after m.Run, when every test's cleanups have run.
func (r *RunDir) End() {
	signal.Stop(r.sigs)
	close(r.stopped)
	if r.hadTmp {
		os.Setenv("TMPDIR", r.oldTmp)
	} else {
		os.Unsetenv("TMPDIR")
	}
	os.RemoveAll(r.dir)
}

// pending holds the cleanups registered with OnInterrupt and not yet run.
var pending struct {
	sync.Mutex
	seq int
	fns map[int]func()
}

// OnInterrupt registers fn for the SIGINT/SIGTERM path of Begin and returns a
// function that runs fn at most once, from whichever path comes first, and
// drops it from that path.
func OnInterrupt(fn func()) func() {
	pending.Lock()
	if pending.fns == nil {
		pending.fns = map[int]func(){}
	}
	pending.seq++
	id := pending.seq
	var once sync.Once
	run := func() {
		pending.Lock()
		delete(pending.fns, id)
		pending.Unlock()
		once.Do(fn)
	}
	pending.fns[id] = func() { once.Do(fn) }
	pending.Unlock()
	return run
}

// Cleanup registers fn with tb.Cleanup and with the SIGINT/SIGTERM path of
// Begin; it runs once. Register it before making the resource fn removes,
// and write fn so that it is harmless when the resource was never made.
func Cleanup(tb testing.TB, fn func()) {
	tb.Cleanup(OnInterrupt(fn))
}

// Interrupt is what Begin does on SIGINT or SIGTERM, before it removes the
// run directory: it kills every child's process group, then runs every
// pending cleanup, newest first.
func Interrupt() {
	killLive()
	pending.Lock()
	ids := make([]int, 0, len(pending.fns))
	for id := range pending.fns {
		ids = append(ids, id)
	}
	fns := pending.fns
	pending.fns = map[int]func(){}
	pending.Unlock()
	slices.Sort(ids)
	for _, id := range slices.Backward(ids) {
		runRecovered(fns[id])
	}
}

// runRecovered runs fn; a panic in one cleanup must not stop the others.
func runRecovered(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintln(os.Stderr, "testproc: a cleanup panicked:", r)
		}
	}()
	fn()
}
