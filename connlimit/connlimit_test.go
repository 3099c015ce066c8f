package connlimit

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialFrom opens a connection to addr from the loopback address from
// (127.0.0.0/8 is all the machine's own).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAcceptOutlastsDescriptorShortage runs the process out of file
// descriptors with connections waiting to be accepted: a bare listener's
// Accept fails (EMFILE), which ends a server's Serve loop; the wrapped one
// waits, logs, and accepts once a descriptor is free.
func TestAcceptOutlastsDescriptorShortage(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	wl := Wrap(ln, Limits{}, Options{Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer wl.Close()

	// Three clients connect (the kernel completes their handshakes); then
	// the limit is lowered to the descriptors open now, leaving none for
	// Accept.
	clients := []net.Conn{dialFrom(t, "127.0.0.1", ln.Addr().String()), dialFrom(t, "127.0.0.1", ln.Addr().String()), dialFrom(t, "127.0.0.1", ln.Addr().String())}
	open := openFDs(t)
	low := lim
	low.Cur = uint64(open)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Errorf("restore RLIMIT_NOFILE: %v", err)
			}
		}
	}
	defer restore()

	// The bare listener gives up.
	if _, err := ln.Accept(); !errors.Is(err, syscall.EMFILE) {
		restore()
		t.Fatalf("bare Accept with no descriptor left: %v, want EMFILE", err)
	}
	type accepted struct {
		c   net.Conn
		err error
	}
	got := make(chan accepted, 1)
	go func() { c, err := wl.Accept(); got <- accepted{c, err} }()
	waitFor(t, "the wrapped Accept to meet the shortage", func() bool { return bytes.Contains([]byte(logs.String()), []byte("too many open files")) })
	select {
	case a := <-got:
		restore()
		t.Fatalf("the wrapped Accept returned while no descriptor was free: %v, %v", a.c, a.err)
	default:
	}
	clients[0].Close() // one descriptor free
	a := <-got
	restore()
	if a.err != nil {
		t.Fatalf("wrapped Accept: %v", a.err)
	}
	a.c.Close()
}

// openFDs is the lowest free file descriptor number: with the limit there,
// the process can open no more (a limit is on descriptor numbers, and a
// new descriptor takes the lowest free one).
func openFDs(t *testing.T) int {
	t.Helper()
	for fd := 0; fd < 1<<16; fd++ {
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil {
			return fd
		}
	}
	t.Skip("no free descriptor number below 65536")
	return 0
}

// TestCaps holds connections from two client networks against a listener
// capped at 3 in all and 2 per network: the connection over a cap is
// answered by Refuse and closed, counted, and a place freed by a close is
// taken again.
func TestCaps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	wl := Wrap(ln, Limits{Total: 3, PerNetwork: 2}, Options{
		MinIdle: time.Hour, // the held connections never read: idle, but never for room here
		Name:    "test", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Refuse: func(c net.Conn, over string) {
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nX-Over: "+over+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		},
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer wl.Close()
	accepted := make(chan net.Conn, 16)
	wg.Go(func() {
		for {
			c, err := wl.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	})
	addr := ln.Addr().String()
	refusal := func(c net.Conn) string {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the refusal: %v", err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Over")
	}
	var held []net.Conn
	take := func() net.Conn { t.Helper(); c := <-accepted; held = append(held, c); return c }

	dialFrom(t, "127.0.0.1", addr)
	dialFrom(t, "127.0.0.1", addr)
	take()
	take()
	if over := refusal(dialFrom(t, "127.0.0.1", addr)); over != "network" {
		t.Errorf("third connection from one network refused for %q, want network", over)
	}
	dialFrom(t, "127.0.0.2", addr)
	take()
	if over := refusal(dialFrom(t, "127.0.0.3", addr)); over != "total" {
		t.Errorf("fourth connection in all refused for %q, want total", over)
	}
	if n := wl.Refused(); n != 2 {
		t.Errorf("refused %d, want 2", n)
	}
	if n := wl.Open(); n != 3 {
		t.Errorf("open %d, want 3", n)
	}
	// A close frees its place, once however often it is closed.
	held[0].Close()
	held[0].Close()
	waitFor(t, "the place to be freed", func() bool { return wl.Open() == 2 })
	dialFrom(t, "127.0.0.1", addr)
	take()
	if n := wl.Open(); n != 3 {
		t.Errorf("open %d after a place was taken again, want 3", n)
	}
	if !bytes.Contains([]byte(logs.String()), []byte("over the listener's cap")) {
		t.Errorf("no log line for the refusals:\n%s", logs.String())
	}
	for _, c := range held {
		c.Close()
	}
}

func TestNetwork(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000} }
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{tcp("192.0.2.7"), "192.0.2.7/32"},
		{tcp("::ffff:192.0.2.7"), "192.0.2.7/32"},
		{tcp("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64"},
		{tcp("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::/64"},
		{&net.UnixAddr{Name: "@sock", Net: "unix"}, "invalid Prefix"},
		{nil, "invalid Prefix"},
	} {
		if got := Network(tt.addr).String(); got != tt.want {
			t.Errorf("Network(%v) = %s, want %s", tt.addr, got, tt.want)
		}
	}
	if Network(tcp("2001:db8:1:2::1")) == Network(tcp("2001:db8:1:3::1")) {
		t.Error("two /64s count as one network")
	}
}

func TestCapsFor(t *testing.T) {
	for _, tt := range []struct {
		fds  int
		want Caps
	}{
		{65536, Caps{Intake: Limits{60928, 512}, Admin: Limits{256, 16}, ClusterUnauthenticated: Limits{256, 64}}},
		{0, Caps{Intake: Limits{60928, 512}, Admin: Limits{256, 16}, ClusterUnauthenticated: Limits{256, 64}}},
		{1024, Caps{Intake: Limits{576, 512}, Admin: Limits{96, 16}, ClusterUnauthenticated: Limits{96, 64}}},
		{20000, Caps{Intake: Limits{15392, 512}, Admin: Limits{256, 16}, ClusterUnauthenticated: Limits{256, 64}}},
		{64, Caps{Intake: Limits{36, 512}, Admin: Limits{6, 6}, ClusterUnauthenticated: Limits{6, 6}}},
	} {
		got := CapsFor(tt.fds, 512)
		if got != tt.want {
			t.Errorf("CapsFor(%d) = %+v, want %+v", tt.fds, got, tt.want)
		}
		// The listeners' caps leave the reserve free.
		if fds := tt.fds; fds > 0 && got.Intake.Total+got.Admin.Total+got.ClusterUnauthenticated.Total > fds-min(fds/4, 4096) {
			t.Errorf("CapsFor(%d) takes the reserve: %+v", tt.fds, got)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "accept", Err: syscall.EMFILE}, true},
		{&net.OpError{Op: "accept", Err: syscall.ENFILE}, true},
		{&net.OpError{Op: "accept", Err: syscall.ECONNABORTED}, true},
		{net.ErrClosed, false},
		{io.EOF, false},
		{errors.New("use of closed network connection"), false},
	} {
		if got := Transient(tt.err); got != tt.want {
			t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestSampler: a burst of lines gets through, then about ten a second,
// each with the count of those held back since the last one written.
func TestSampler(t *testing.T) {
	var s Sampler
	t0 := time.Unix(1_700_000_000, 0)
	for i := range sampleBurst {
		if n, ok := s.Allow(t0); !ok || n != 0 {
			t.Fatalf("line %d of the burst: %d %v", i, n, ok)
		}
	}
	for i := range 5 {
		if _, ok := s.Allow(t0); ok {
			t.Fatalf("line %d past the burst got through", i)
		}
	}
	// A tenth of a second later, one more, naming the five held back.
	if n, ok := s.Allow(t0.Add(100 * time.Millisecond)); !ok || n != 5 {
		t.Fatalf("after 100 ms: %d held, %v; want 5, true", n, ok)
	}
	if _, ok := s.Allow(t0.Add(100 * time.Millisecond)); ok {
		t.Fatal("a second line in the same tenth of a second got through")
	}
	// A clock stepped back refills nothing.
	if _, ok := s.Allow(t0); ok {
		t.Fatal("a clock stepped back refilled the sampler")
	}
	if n, ok := s.Allow(t0.Add(2 * time.Second)); !ok || n != 2 {
		t.Fatalf("after two seconds: %d held, %v; want 2, true", n, ok)
	}
}
