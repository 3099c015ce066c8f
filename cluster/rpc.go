package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
	"oncehook/idleconn"
)

// The internal channel: a follower sends framed requests over a relay stream
// and the leader answers each in order on the same stream.
//
//	request:  u32 length | op byte | body
//	response: u32 length | status byte | body
const (
	rpcApply byte = 1 // body: engine entry encoding of the commands
	rpcJoin  byte = 2 // body: uvarint-length id, address
	rpcStats byte = 3 // body: empty; answer: JSON memberStats (any member answers)

	rpcOK         byte = 0 // body: encoded results
	rpcNotLeader  byte = 1
	rpcNoLeader   byte = 2
	rpcUnknown    byte = 3 // indeterminate outcome
	rpcErr        byte = 4 // body: message
	rpcBadRequest byte = 5
	// maxFrame admits the largest batch a follower's proposer sends: its
	// byte bound (maxEntryBytes) reached by all but the last proposal, and a
	// last claim carrying a payload of the largest size a source accepts,
	// with room for keys, headers and the encoding.
	maxFrame   = maxEntryBytes + engine.MaxPayloadLen + 4<<20
	frameChunk = 1 << 20 // a frame over this is read in growing steps
)

func writeFrame(w *bufio.Writer, kind byte, body []byte) error {
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(body)+1))
	hdr[4] = kind
	w.Write(hdr[:])
	w.Write(body)
	return w.Flush()
}

func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:4]))
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	if cap(buf) >= n-1 || n-1 <= frameChunk {
		if cap(buf) < n-1 {
			buf = make([]byte, n-1)
		}
		buf = buf[:n-1]
		if _, err := io.ReadFull(r, buf); err != nil {
			return 0, nil, err
		}
		return hdr[4], buf, nil
	}
	// A large frame's buffer grows as its bytes arrive, so that a header
	// alone never costs maxFrame of memory.
	buf = buf[:0]
	for len(buf) < n-1 {
		start := len(buf)
		next := min(n-1, max(2*start, frameChunk))
		buf = slices.Grow(buf, next-start)[:next]
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return 0, nil, err
		}
	}
	return hdr[4], buf, nil
}

// serveRelay answers one follower's stream until it closes.
func (n *Node) serveRelay(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(c, 16<<10)
	var buf, out []byte
	for {
		op, body, err := readFrame(r, buf)
		if err != nil {
			return
		}
		buf = body[:0]
		if cap(buf) > frameChunk {
			// A stream lives as long as its follower's pool keeps it: the
			// buffer of one large batch (bodies up to max_body) must not
			// stay with it.
			buf = nil
		}
		if n.cfg.relayKept != nil {
			n.cfg.relayKept(cap(buf))
		}
		status, resp := n.handleRPC(context.Background(), op, body, out[:0])
		out = resp[:0]
		if err := writeFrame(w, status, resp); err != nil {
			return
		}
	}
}

// handleRPC answers one request of the internal channel. ctx is the caller's
// in process (tests on raft.InmemTransport), context.Background() over TCP.
func (n *Node) handleRPC(ctx context.Context, op byte, body, out []byte) (byte, []byte) {
	if !n.started.Load() {
		return rpcNoLeader, append(out, "node still starting"...)
	}
	ctx, cancel := context.WithTimeout(ctx, n.relayTimeout)
	defer cancel()
	switch op {
	case rpcApply:
		cmds, err := engine.DecodeEntry(body)
		if err != nil {
			return rpcBadRequest, append(out, err.Error()...)
		}
		for i := range cmds {
			if !relayable(cmds[i].Op) {
				return rpcBadRequest, fmt.Appendf(out, "command %d: %s is the leader's own work and is never relayed", i, cmds[i].Op)
			}
		}
		res, err := n.propose(ctx, cmds, true)
		if err != nil {
			return errStatus(err), append(out, err.Error()...)
		}
		return rpcOK, appendResults(out, res)
	case rpcJoin:
		id, addr, err := decodeJoin(body)
		if err != nil {
			return rpcBadRequest, append(out, err.Error()...)
		}
		added, err := n.Join(ctx, id, addr)
		if err != nil {
			return errStatus(err), append(out, err.Error()...)
		}
		if !added {
			out = append(out, joinUnchanged...)
		}
		return rpcOK, out
	case rpcStats:
		if n.statsUnknown.Load() {
			break
		}
		if d := time.Duration(n.statsDelay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return rpcErr, append(out, ctx.Err().Error()...)
			}
		}
		b, err := json.Marshal(n.ownStats())
		if err != nil {
			return rpcErr, append(out, err.Error()...)
		}
		return rpcOK, append(out, b...)
	}
	return rpcBadRequest, append(out, "unknown op"...)
}

// relayable reports whether a follower may hand a command of op to the
// leader. Leases, outcomes, reclaims, expiry and payload drops are the
// leader's delivery work under its own term (ops.go): relayed, they would
// let a deposed leader, or any peer holding the cluster's credentials, mark
// an event done with the token a follower's copy shows while the leader's
// worker still delivers it, or make events dead.
func relayable(op engine.Op) bool {
	switch op {
	case engine.OpClaim, engine.OpReplay, engine.OpPause, engine.OpResume, engine.OpPurge, engine.OpNoop:
		return true
	}
	return false
}

func errStatus(err error) byte {
	switch {
	case errors.Is(err, ErrNotLeader):
		return rpcNotLeader
	case errors.Is(err, ErrNoLeader), errors.Is(err, ErrShutdown):
		return rpcNoLeader
	case errors.Is(err, ErrIndeterminate):
		return rpcUnknown
	}
	return rpcErr
}

func statusErr(status byte, msg []byte) error {
	// The leader's message ends with the sentinel's own text, which the
	// wrap below adds again.
	switch status {
	case rpcNotLeader, rpcNoLeader:
		m := strings.TrimSuffix(strings.TrimSuffix(string(msg), ": "+ErrNoLeader.Error()), ": "+ErrNotLeader.Error())
		return fmt.Errorf("leader refused: %s: %w", m, ErrNoLeader)
	case rpcUnknown:
		return fmt.Errorf("leader: %s: %w", strings.TrimSuffix(string(msg), ": "+ErrIndeterminate.Error()), ErrIndeterminate)
	}
	return fmt.Errorf("leader: %s", msg)
}

// joinUnchanged is a join's answer when the node was a voter at that address
// already; an added voter's answer is empty (as every release's is).
const joinUnchanged = "member"

func encodeJoin(id, addr string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(id)))
	b = append(b, id...)
	return append(b, addr...)
}

func decodeJoin(b []byte) (string, string, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return "", "", errors.New("bad join request")
	}
	return string(b[k : k+int(n)]), string(b[k+int(n):]), nil
}

// A result's flags. resultMore (and the cursor after the keys) is set only
// on the answer to a replay by state with a max, which a peer older than
// format 21 never sends: it reads the flag of Created alone.
const (
	resultCreated = 1 << iota
	resultMore
)

// Results travel back without lease events: leases run on the leader only.
var resultErrs = []error{nil, engine.ErrStaleToken, engine.ErrNotFound, engine.ErrWrongState,
	engine.ErrAlreadyApplied, engine.ErrCorrupt, engine.ErrBadCommand}

// messageErrs are the outcomes added after resultErrs was fixed on the
// wire: a result carrying one goes as an "other error", its text, which
// every version reads, and the receiver gives it back its sentinel by that
// text (a new code would be misread by an older peer during an upgrade).
var messageErrs = []error{engine.ErrNoPayload, engine.ErrSuperseded, engine.ErrLastAttemptRunning}

// messageErr is the error of an "other error" result, with its sentinel
// when its text names one of messageErrs.
func messageErr(msg string) error {
	for _, e := range messageErrs {
		if prefix, found := strings.CutSuffix(msg, e.Error()); found {
			if prefix = strings.TrimSuffix(prefix, ": "); prefix == "" {
				return e
			}
			return fmt.Errorf("%s: %w", prefix, e)
		}
	}
	return errors.New(msg)
}

func appendResults(b []byte, res []engine.Result) []byte {
	b = binary.AppendUvarint(b, uint64(len(res)))
	for _, r := range res {
		var flags byte
		if r.Created {
			flags = resultCreated
		}
		if r.More {
			flags |= resultMore
		}
		code := byte(len(resultErrs)) // other error
		for i, e := range resultErrs {
			if r.Err == e || (e != nil && errors.Is(r.Err, e)) {
				code = byte(i)
				break
			}
		}
		b = append(b, flags, byte(r.State), code)
		if int(code) == len(resultErrs) {
			msg := r.Err.Error()
			b = binary.AppendUvarint(b, uint64(len(msg)))
			b = append(b, msg...)
		}
		b = binary.AppendUvarint(b, uint64(r.N))
		b = binary.AppendUvarint(b, uint64(len(r.Keys)))
		for _, k := range r.Keys {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
		}
		if r.More {
			b = binary.AppendVarint(b, r.Before)
			b = binary.AppendVarint(b, r.AfterTime)
			b = binary.AppendUvarint(b, uint64(len(r.After)))
			b = append(b, r.After...)
		}
	}
	return b
}

func decodeResults(b []byte) ([]engine.Result, error) {
	bad := errors.New("malformed results")
	uv := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := uv()
		if !ok || uint64(len(b)) < n {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	count, ok := uv()
	if !ok || count > uint64(len(b)) {
		return nil, bad
	}
	res := make([]engine.Result, count)
	for i := range res {
		if len(b) < 3 {
			return nil, bad
		}
		flags := b[0]
		res[i].Created = flags&resultCreated != 0
		res[i].State = engine.State(b[1])
		code := int(b[2])
		b = b[3:]
		switch {
		case code < len(resultErrs):
			res[i].Err = resultErrs[code]
		case code == len(resultErrs):
			msg, ok := str()
			if !ok {
				return nil, bad
			}
			res[i].Err = messageErr(msg)
		default:
			return nil, bad
		}
		nv, ok := uv()
		if !ok {
			return nil, bad
		}
		res[i].N = int(nv)
		nk, ok := uv()
		if !ok || nk > uint64(len(b)) {
			return nil, bad
		}
		for j := uint64(0); j < nk; j++ {
			k, ok := str()
			if !ok {
				return nil, bad
			}
			res[i].Keys = append(res[i].Keys, k)
		}
		if flags&resultMore != 0 {
			var ts [2]int64
			for j := range ts {
				t, k := binary.Varint(b)
				if k <= 0 {
					return nil, bad
				}
				ts[j], b = t, b[k:]
			}
			after, ok := str()
			if !ok {
				return nil, bad
			}
			res[i].More, res[i].Before, res[i].AfterTime, res[i].After = true, ts[0], ts[1], after
		}
	}
	return res, nil
}

// relayer keeps a few open streams to the current leader.
type relayer struct {
	n    *Node
	mu   sync.Mutex
	addr string
	idle []*relayConn
}

type relayConn struct {
	c   net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	buf []byte
}

const maxIdleRelay = 8

func (f *relayer) get(ctx context.Context, addr string) (*relayConn, error) {
	f.mu.Lock()
	if f.addr != addr {
		for _, fc := range f.idle {
			fc.c.Close()
		}
		f.idle, f.addr = nil, addr
	}
	for k := len(f.idle); k > 0; k = len(f.idle) {
		fc := f.idle[k-1]
		f.idle = f.idle[:k-1]
		f.mu.Unlock()
		// A stream kept from before the leader restarted would fail the
		// request after sending it, an outcome unknown for what the new
		// process never received: such a stream is dropped, not used.
		if fc.r.Buffered() > 0 || !idleconn.Reusable(fc.c) {
			fc.c.Close()
			f.mu.Lock()
			continue
		}
		return fc, nil
	}
	f.mu.Unlock()
	if f.n.mux == nil {
		return nil, fmt.Errorf("relay to %s: %w", addr, ErrNoLeader)
	}
	if f.n.unreachableNow(addr) {
		return nil, fmt.Errorf("relay to %s: the leader's cluster port could not be reached from this node a moment ago: %w", addr, ErrNoLeader)
	}
	c, err := f.n.mux.dial(ctx, addr, kindRelay, 5*time.Second)
	if err == nil || ctx.Err() == nil {
		// A dial its caller gave up on (a leader change) says nothing of
		// the leader's port.
		f.n.noteRelayDial(addr, err)
	}
	if err != nil {
		// Nothing was sent: the commands did not reach any leader.
		return nil, fmt.Errorf("dial leader %s: %w: %w", addr, err, ErrNoLeader)
	}
	return &relayConn{c: c, r: bufio.NewReaderSize(c, 16<<10), w: bufio.NewWriterSize(c, 64<<10)}, nil
}

func (f *relayer) put(addr string, fc *relayConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addr != addr || len(f.idle) >= maxIdleRelay {
		fc.c.Close()
		return
	}
	f.idle = append(f.idle, fc)
}

func (f *relayer) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.idle {
		fc.c.Close()
	}
	f.idle = nil
}

// call sends one request to the leader at addr and returns its answer body.
// ctx ends the call early (a leader change, see leaderWatch): the stream is
// closed under a blocked write or read, and the outcome is unknown, as for a
// timeout, because the leader may have received the request.
func (f *relayer) call(ctx context.Context, addr string, op byte, body []byte) ([]byte, error) {
	if f.n.inproc != nil {
		peer := f.n.inproc(addr)
		if peer == nil {
			return nil, fmt.Errorf("relay to %s: unreachable: %w", addr, ErrNoLeader)
		}
		status, resp := peer.handleRPC(ctx, op, body, nil)
		if status != rpcOK {
			return nil, statusErr(status, resp)
		}
		return resp, nil
	}
	fc, err := f.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		fc.c.Close()
		return nil, fmt.Errorf("relay to leader %s: %v: %w", addr, context.Cause(ctx), ErrNoLeader) // nothing sent
	}
	deadline := time.Now().Add(f.n.relayTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = fc.c.SetDeadline(deadline)
	// A leader that froze (SIGSTOP) or was cut off keeps the stream open and
	// silent; closing it is what unblocks this call when ctx ends first.
	stop := context.AfterFunc(ctx, func() { fc.c.Close() })
	fail := func(err error) error {
		fc.c.Close()
		if isTimeout(err) || errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			// No answer in time on a stream that was open: ask with a
			// dial whether the leader can still be reached from here.
			f.n.probeLeader(addr)
		}
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		} else {
			// The leader restarted, or its streams broke: the idle ones were
			// opened before and would fail the next batches the same way.
			f.closeAll()
		}
		return fmt.Errorf("relay to leader %s: %w: %w", addr, err, ErrIndeterminate)
	}
	if err := writeFrame(fc.w, op, body); err != nil {
		stop()
		// Nothing reached the leader for certain only if the write failed before
		// any byte left; we cannot tell, so the outcome is unknown.
		return nil, fail(err)
	}
	status, resp, err := readFrame(fc.r, fc.buf)
	if err != nil {
		stop()
		return nil, fail(err)
	}
	out := append([]byte(nil), resp...)
	fc.buf = resp[:0]
	if stop() {
		_ = fc.c.SetDeadline(time.Time{})
		f.put(addr, fc)
	} else {
		fc.c.Close() // ctx ended just after the answer: the stream is closed; the answer stands
	}
	if status != rpcOK {
		return nil, statusErr(status, out)
	}
	return out, nil
}

// errLeaderChanged is why a relay ended early: this node saw the leader
// change. The old leader may still commit what it received.
var errLeaderChanged = errors.New("the leader changed")

// leaderWatch is the leader this node observes, with a context for the calls
// made to it. The context is cancelled when the observed leader changes,
// including to none (this follower stopped hearing heartbeats and started an
// election). Relays to a leader that froze or was cut off then end at once
// instead of at their timeout, and give their slots to the next leader.
//
// Every read asks raft (under mu, so a later read never records an older
// leader than an earlier one): the watch is never behind raft for a caller.
// A raft observer (Node.watchLeader) reads it on every leader change, which is
// what cancels the calls in flight when nobody else is asking.
type leaderWatch struct {
	leader func() (raft.ServerAddress, raft.ServerID) // raft's view
	// term is raft's current term. It is read before the leader: raft
	// clears the leader before it takes a higher term, so a leader read
	// after a new term is never the one of the term before.
	term func() uint64

	mu        sync.Mutex
	addr      raft.ServerAddress
	id        raft.ServerID
	known     raft.ServerID // the last leader seen; id is "" between leaders
	knownTerm uint64        // the term known was seen in
	changes   uint64        // leaderships seen: another leader, or the same one elected again
	ctx       context.Context
	cancel    context.CancelCauseFunc
	closed    bool
}

func newLeaderWatch(leader func() (raft.ServerAddress, raft.ServerID), term func() uint64) *leaderWatch {
	w := &leaderWatch{leader: leader, term: term}
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	return w
}

// current returns the leader's address ("" for none) as raft knows it now,
// and a context that ends when that changes or the node closes.
func (w *leaderWatch) current() (raft.ServerAddress, context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return "", w.ctx
	}
	// The term before and after the leader: an election between the two
	// reads would pair the new leader with the old term, and count it again
	// when seen with its own.
	term := w.term()
	addr, id := w.leader()
	for t := w.term(); t != term; t = w.term() {
		term = t
		addr, id = w.leader()
	}
	if addr != w.addr || id != w.id {
		w.cancel(fmt.Errorf("%w (from %q to %q)", errLeaderChanged, w.id, id))
		w.addr, w.id = addr, id
		w.ctx, w.cancel = context.WithCancelCause(context.Background())
	}
	// A leader that lost its quorum and won the next election is a new
	// leadership too: the deliveries it had in flight are repeated, as
	// after a change of node (docs/operations.md, "Timeouts").
	if id != "" && (id != w.known || term != w.knownTerm) {
		w.known, w.knownTerm = id, term
		w.changes++
	}
	return w.addr, w.ctx
}

// leaderChanges is the number of leaderships seen, the first one included:
// a leader other than the last one, or the same one in a new term; on every
// node, not only those elected.
func (w *leaderWatch) leaderChanges() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changes
}

// close ends the current context for good (cause ErrShutdown).
func (w *leaderWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.cancel(ErrShutdown)
}
