//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Enabled reports whether this build has failpoints: it does.
const Enabled = true

// pollInterval is how often the control files are re-read.
const pollInterval = 100 * time.Millisecond

type kind int

const (
	actOff kind = iota
	actPanic
	actSleep
)

type action struct {
	kind kind
	d    time.Duration
}

var (
	static  map[string]action                 // ONCEHOOK_FAILPOINTS, set once in init
	dynamic atomic.Pointer[map[string]action] // ONCEHOOK_FAILPOINTS_FILE, replaced by the poller
	offset  atomic.Int64                      // ONCEHOOK_TEST_CLOCK_OFFSET_FILE, ns

	hitsMu sync.Mutex
	hits   = map[string]int{}
)

func init() {
	if _, err := setup(os.Getenv(EnvSpec), os.Getenv(EnvFile), os.Getenv(EnvClockFile)); err != nil {
		fmt.Fprintf(os.Stderr, "failpoint: %v\n", err)
		os.Exit(2)
	}
}

// setup arms the static failpoints and starts the poller when a control file
// is named; stop ends the poller (tests; a process never stops it).
func setup(spec, file, clockFile string) (stop func(), err error) {
	m, err := parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvSpec, err)
	}
	static = m
	if file == "" && clockFile == "" {
		return func() {}, nil
	}
	var lastSpec, lastClock string
	poll := func() {
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return
			}
			if s := string(b); s != lastSpec {
				m, err := parse(s)
				if err != nil {
					fmt.Fprintf(os.Stderr, "failpoint: %s: %v (keeping the previous set)\n", file, err)
				} else {
					dynamic.Store(&m)
					fmt.Fprintf(os.Stderr, "failpoint: armed from %s: %q\n", file, strings.TrimSpace(s))
				}
				lastSpec = s
			}
		}
		if clockFile != "" {
			b, err := os.ReadFile(clockFile)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return
			}
			if s := strings.TrimSpace(string(b)); s != lastClock {
				d := time.Duration(0)
				if s != "" {
					d, err = time.ParseDuration(s)
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "failpoint: %s: %v (keeping the previous offset)\n", clockFile, err)
				} else {
					offset.Store(int64(d))
					fmt.Fprintf(os.Stderr, "failpoint: clock offset %s\n", d)
				}
				lastClock = s
			}
		}
	}
	poll() // the first read before anything runs
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				poll()
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }, nil
}

// parse reads "name=action;name2=action2" (";" or "," or newlines between
// entries; blank entries ignored).
func parse(spec string) (map[string]action, error) {
	m := map[string]action{}
	for _, e := range strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ',' || r == '\n' }) {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, act, ok := strings.Cut(e, "=")
		name, act = strings.TrimSpace(name), strings.TrimSpace(act)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=action", e)
		}
		a, err := parseAction(act)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m[name] = a
	}
	return m, nil
}

func parseAction(s string) (action, error) {
	switch {
	case s == "off":
		return action{kind: actOff}, nil
	case s == "panic":
		return action{kind: actPanic}, nil
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		d, err := time.ParseDuration(s[len("sleep(") : len(s)-1])
		if err != nil || d < 0 {
			return action{}, fmt.Errorf("bad sleep duration in %q", s)
		}
		return action{kind: actSleep, d: d}, nil
	}
	return action{}, fmt.Errorf("unknown action %q (want panic, sleep(DURATION) or off)", s)
}

func lookup(name string) action {
	if p := dynamic.Load(); p != nil {
		if a, ok := (*p)[name]; ok {
			return a
		}
	}
	return static[name]
}

// Inject runs the action armed for name, if any: panic crashes the process
// (the goroutine's panic is not recovered on the paths the hooks sit on),
// sleep blocks the caller.
func Inject(name string) {
	a := lookup(name)
	if a.kind == actOff {
		return
	}
	hitsMu.Lock()
	hits[name]++
	first := hits[name] == 1
	hitsMu.Unlock()
	switch a.kind {
	case actPanic:
		fmt.Fprintf(os.Stderr, "failpoint: %s: panic\n", name)
		panic("failpoint " + name)
	case actSleep:
		if first {
			fmt.Fprintf(os.Stderr, "failpoint: %s: sleep(%s) (first hit)\n", name, a.d)
		}
		time.Sleep(a.d)
	}
}

// Hits reports how often name's action ran in this process.
func Hits(name string) int {
	hitsMu.Lock()
	defer hitsMu.Unlock()
	return hits[name]
}

// Now is the wall clock shifted by the test clock offset.
func Now() time.Time {
	if d := offset.Load(); d != 0 {
		return time.Now().Add(time.Duration(d))
	}
	return time.Now()
}
