package chaos

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/internal/testcluster"
)

// TestClusterTokenIntruder: three real nodes on loopback whose cluster port
// is guarded by a token only (no TLS). An intruder that knows the wire format
// but not the token opens a raw TCP connection to the leader's cluster port,
// sends the preamble of a forward stream with an empty or short token, then
// an rpcJoin for itself and an rpcApply of a claim (the internal channel's
// own framing, as cluster/rpc.go reads it), and a Raft RequestVote on a raft
// stream. Each is refused at the preamble: no answer, the leader logs the
// rejection, the configuration stays at three voters, the term does not move
// and the claim is nowhere. The control, the same frames with the right
// token, gets its apply committed: the intruder's frames are the real thing.
// First, a node whose cluster port would need no token at all (one peer, no
// token_file, no TLS: what used to start and admit such an intruder) must
// refuse to start.
func TestClusterTokenIntruder(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns three nodes")
	}
	dir := t.TempDir()
	writeSecret(t, filepath.Join(dir, "admin.token"), adminToken)
	writeSecret(t, filepath.Join(dir, "orders.secret"), canarySecret)
	rec := newRecorder(t)

	// Without token or TLS there is no cluster port to intrude on: serve
	// refuses the config, even for a cluster of one, and nothing listens.
	t.Run("no token, no TLS: refused at start", func(t *testing.T) {
		n := newLoopNode(t, "open1")
		writeLoopNode(t, dir, n, []string{n.id + "=" + n.raft}, tlsMaterial{}, rec.addr)
		p, exited := serveExit(t, n.cfg)
		if !exited {
			if c, derr := net.DialTimeout("tcp", n.raft, time.Second); derr == nil {
				c.Close()
				t.Error("the cluster port is open")
			}
			t.Fatalf("a node with an unauthenticated cluster port started:\n%s", p.Output())
		}
		out, err := p.Output(), p.Err()
		if err == nil || !strings.Contains(out, "cluster.token_file: required") || !strings.Contains(out, "tls_cert, tls_key and tls_ca") {
			t.Fatalf("serve: %v\n%s", err, out)
		}
	})

	nodes := make([]*lnode, 3)
	var peers []string
	for i := range nodes {
		nodes[i] = newLoopNode(t, fmt.Sprintf("node%d", i+1))
		peers = append(peers, nodes[i].id+"="+nodes[i].raft)
	}
	for _, n := range nodes {
		writeLoopNode(t, dir, n, peers, tlsMaterial{token: clusterTok}, rec.addr)
		n.start(t)
	}
	defer func() {
		for _, n := range nodes {
			n.proc.Stop(10 * time.Second)
		}
	}()
	leader, term := waitLoopLeader(t, "token cluster", nodes)
	// Every node ready, so that a change of membership would show on each.
	for _, n := range nodes {
		if err := testcluster.Await(context.Background(), n.id+" ready with three voters", 30*time.Second, func() (bool, error) {
			st, servers := n.status(t)
			return st.Ready && len(servers) == 3, nil
		}); err != nil {
			t.Fatalf("%v:\n%s", err, n.proc.Tail(10))
		}
	}

	for i, row := range []struct {
		name   string
		token  string
		stream byte // 'F' forward (join + apply), 'R' raft (RequestVote)
		accept bool
	}{
		{"empty token, forward stream", "", 'F', false},
		{"empty token, raft stream", "", 'R', false},
		{"short prefix of the token, forward stream", clusterTok[:31], 'F', false},
		{"right token, forward stream (control)", clusterTok, 'F', true},
	} {
		t.Run(row.name, func(t *testing.T) {
			id := fmt.Sprintf("intruder-%d", i)
			key := "orders:" + id
			rejected := countInFile(leader.logPath, "cluster connection rejected")
			atPreamble := countInFile(leader.logPath, stageField("preamble"))
			var answered error
			if row.stream == 'R' {
				if resp, err := probeRequestVote(leader.raft, nil, row.token); err == nil {
					answered = fmt.Errorf("RequestVote answered (term %d)", resp.Term)
				}
			} else {
				answered = intrude(t, leader.raft, row.token, row.accept, key)
			}
			if row.accept {
				if answered != nil {
					t.Fatalf("control: %v\n%s", answered, leader.proc.Tail(5))
				}
				if code, b := getAuth("http://" + leader.admin + "/v1/events/" + key); code != 200 {
					t.Fatalf("control: the applied claim is not there: %d %s", code, b)
				}
				return
			}
			if answered != nil {
				t.Errorf("an intruder with %s: %v", row.name, answered)
			}
			if err := testcluster.Await(context.Background(), "a rejection at the preamble in the leader's log", 10*time.Second, func() (bool, error) {
				return countInFile(leader.logPath, stageField("preamble")) > atPreamble, nil
			}); err != nil {
				t.Fatalf("%v:\n%s", err, leader.proc.Tail(5))
			}
			if countInFile(leader.logPath, "cluster connection rejected") <= rejected {
				t.Errorf("the leader logged no rejected connection")
			}
			for _, n := range nodes {
				st, servers := n.status(t)
				if len(servers) != 3 {
					t.Errorf("%s: the configuration is %v, want the three nodes", n.id, servers)
				}
				for _, s := range servers {
					if s.ID == "intruder" {
						t.Errorf("%s: the intruder is a voter", n.id)
					}
				}
				if st.Term != term {
					t.Errorf("%s: term %d, was %d", n.id, st.Term, term)
				}
				if code, _ := getAuth("http://" + n.admin + "/v1/events/" + key); code != 404 {
					t.Errorf("%s: the intruder's claim %s: %d, want 404", n.id, key, code)
				}
			}
		})
	}
}

// intrude opens a forward stream to addr with token and sends an rpcJoin
// (unless control, which must not change the cluster) and an rpcApply of a
// claim for key. It returns nil when the node answered nothing and closed the
// connection; for control, nil when the apply was answered OK.
func intrude(t *testing.T, addr, token string, control bool, key string) error {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	w := bufio.NewWriter(c)
	w.WriteString("OHK1F")
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(token)))
	w.Write(n[:])
	w.WriteString(token)
	frame := func(op byte, body []byte) {
		var hdr [5]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(body)+1))
		hdr[4] = op
		w.Write(hdr[:])
		w.Write(body)
	}
	if !control {
		join := binary.AppendUvarint(nil, uint64(len("intruder")))
		join = append(append(join, "intruder"...), "127.0.0.1:1"...)
		frame(2, join) // rpcJoin: uvarint-length id, address
	}
	claim := engine.Command{Op: engine.OpClaim, Key: key, Source: "orders", Payload: []byte(`{"id":"` + key + `"}`),
		Retention: int64(time.Hour), LeaseFor: int64(30 * time.Second)}
	frame(1, engine.EncodeEntry(nil, []engine.Command{claim})) // rpcApply
	w.Flush()                                                  // an error here is the node closing: read says more

	var hdr [5]byte
	_, err = io.ReadFull(c, hdr[:])
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return errors.New("the node kept the connection open without answering")
	}
	if control {
		if err != nil {
			return fmt.Errorf("no answer: %w", err)
		}
		if hdr[4] != 0 {
			body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
			io.ReadFull(c, body)
			return fmt.Errorf("status %d: %s", hdr[4], body)
		}
		return nil
	}
	if err == nil {
		return fmt.Errorf("answered with status %d", hdr[4])
	}
	return nil
}
