package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/admin"
	"oncehook/engine"
	"oncehook/providers"
)

// Admin listener hardening: authentication backoff, timeouts, the restore
// bound and TLS.

const hardeningToken = "admin-token-for-hardening-tests-0123456789"

// adminNodeConfig is the test config with extra keys in [admin].
func adminNodeConfig(dir, handlerURL, adminTOML string) string {
	return nodeConfig(dir, handlerURL, adminTOML, "")
}

// startAdminNode starts a node like startTestNode, with adminTOML added to
// its [admin] table and opts given to startNode.
func startAdminNode(t *testing.T, adminTOML string, opts ...nodeOption) (*testNode, *handler) {
	t.Helper()
	h := newHandler(t)
	dir := t.TempDir()
	tn := &testNode{t: t, dir: dir, cfgPath: filepath.Join(dir, "oncehook.toml"), log: &bytes.Buffer{}, logMu: &sync.Mutex{}, opts: opts}
	tn.secret, _ = providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), tn.secret+"\n")
	tn.token = hardeningToken
	mustWrite(t, filepath.Join(dir, "admin.token"), tn.token+"\n")
	mustWrite(t, tn.cfgPath, adminNodeConfig(dir, h.url, adminTOML))
	tn.start()
	return tn, h
}

// fromAddr is a client whose connections come from the loopback address ip.
func fromAddr(t *testing.T, ip string) *http.Client {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func TestAdminAuthBacksOff(t *testing.T) {
	clk := newFakeClock()
	tn, _ := startAdminNode(t, "", withAuthClock(clk.Now))

	type result struct {
		status int
		header http.Header
		body   string
	}
	bearer := func(token string) result {
		req, _ := http.NewRequest(http.MethodGet, tn.admin+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		a := tn.do(req)
		return result{a.Status, a.Header, a.Raw}
	}
	signIn := func(token string) result {
		u := newUIClient(t, tn) // a browser without a session
		form := u.get("/ui/login")
		a := u.post("/ui/login", url.Values{"csrf": {formToken(t, form.body)}, "token": {token}, "next": {"/ui/"}})
		return result{a.status, a.header, a.body}
	}
	for _, tt := range []struct {
		name    string
		try     func(token string) result
		ok      int
		json    bool   // a JSON error, or a page
		tooMany string // in the 429's error or page
	}{
		{"bearer token", bearer, http.StatusOK, true, "too many failed authentication attempts from this address; retry in "},
		{"ui sign-in", signIn, http.StatusSeeOther, false, "Too many failed sign-ins from your address; try again in "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expect := func(step, token string, status int, retryAfter string) {
				t.Helper()
				r := tt.try(token)
				if r.status != status || r.header.Get("Retry-After") != retryAfter {
					t.Fatalf("%s: %d Retry-After %q, want %d %q\n%s", step, r.status, r.header.Get("Retry-After"), status, retryAfter, r.body)
				}
				if status != http.StatusTooManyRequests {
					return
				}
				why := r.body
				if tt.json {
					why = errorJSON(t, r.body)
				}
				if !strings.Contains(why, tt.tooMany+retryAfter+" ") {
					t.Fatalf("%s: 429 does not say why:\n%s", step, r.body)
				}
			}
			for i := range admin.AuthFreeFailures {
				expect(fmt.Sprintf("wrong token %d", i+1), "wrong-"+tn.token, http.StatusUnauthorized, "")
			}
			// Backing off: not even the right token is looked at.
			expect("right token while backing off", tn.token, http.StatusTooManyRequests, "1")
			clk.Advance(time.Second)
			expect("wrong token after the wait", "wrong", http.StatusUnauthorized, "")
			expect("the next wait doubles", tn.token, http.StatusTooManyRequests, "2")
			clk.Advance(1500 * time.Millisecond)
			expect("half a second left", tn.token, http.StatusTooManyRequests, "1")

			// Another address is not held back.
			req, _ := http.NewRequest(http.MethodGet, tn.admin+"/v1/status", nil)
			req.Header.Set("Authorization", "Bearer "+tn.token)
			resp, err := fromAddr(t, "127.0.0.2").Do(req)
			if err != nil {
				t.Fatalf("from 127.0.0.2: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("from 127.0.0.2 while 127.0.0.1 backs off: %d", resp.StatusCode)
			}

			clk.Advance(500 * time.Millisecond)
			expect("right token once the wait is over", tn.token, tt.ok, "")
			// The success reset the count.
			for i := range admin.AuthFreeFailures - 1 {
				expect(fmt.Sprintf("wrong token %d after a success", i+1), "wrong", http.StatusUnauthorized, "")
			}
			expect("right token again", tn.token, tt.ok, "")
		})
	}
	if !strings.Contains(tn.logs(), "repeated authentication failures; backing off") {
		t.Error("backoff not logged")
	}
}

// shortAdminTimeouts lets tests see timeouts fire in a fraction of a second.
var shortAdminTimeouts = admin.Timeouts{
	ReadHeader: 300 * time.Millisecond,
	Read:       300 * time.Millisecond,
	Write:      time.Second,
	Idle:       300 * time.Millisecond,
	Stream:     5 * time.Second,
	MaxHeader:  8 << 10,
}

// TestAdminCutsOffSlowClients: a client that sends its headers and then
// dribbles the body, or dribbles the headers, or idles on a kept-alive
// connection, is disconnected after the configured timeout, not when it
// pleases.
func TestAdminCutsOffSlowClients(t *testing.T) {
	tn, _ := startAdminNode(t, "", withAdminTimeouts(shortAdminTimeouts))
	addr := tn.n.adminLn.Addr().String()
	for _, tt := range []struct {
		name    string
		opening string // sent at once
		dribble bool   // then one byte every 20 ms
	}{
		{"body dribbled to /ui/login", "POST /ui/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ntoken=", true},
		{"headers dribbled", "GET /ui/login HTTP/1.1\r\nHost: x\r\nX-Slow: ", true},
		{"idle after a request", "GET /ui/static/style.css HTTP/1.1\r\nHost: x\r\n\r\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			closed := make(chan struct{})
			go func() {
				io.Copy(io.Discard, conn) // until the server closes the connection
				close(closed)
			}()
			start := time.Now()
			if _, err := io.WriteString(conn, tt.opening); err != nil {
				t.Fatal(err)
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			limit := time.NewTimer(10 * time.Second)
			defer limit.Stop()
			for {
				select {
				case <-closed:
					t.Logf("closed by the server after %v", time.Since(start).Round(time.Millisecond))
					return
				case <-limit.C:
					t.Fatalf("connection still open after %v", time.Since(start))
				case <-tick.C:
					if tt.dribble {
						conn.Write([]byte("a")) // fails once the server is gone; closed says so
					}
				}
			}
		})
	}
	t.Run("headers over the limit", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, tn.admin+"/ui/static/style.css", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 2*shortAdminTimeouts.MaxHeader+4096))
		if a := tn.do(req); a.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", a.Status)
		}
	})
}

// restoreFiles lists the spooled uploads left in the data directory.
func restoreFiles(t *testing.T, tn *testNode) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(tn.dir, "data", "restore-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAdminRestoreIsBounded(t *testing.T) {
	// Short read and write timeouts: a restore must outlive them while its
	// upload keeps moving.
	tn, _ := startAdminNode(t, "", withAdminTimeouts(admin.Timeouts{
		ReadHeader: time.Second, Read: time.Second, Write: time.Second, Idle: time.Minute, Stream: 10 * time.Second, MaxHeader: 64 << 10,
	}))
	for _, id := range []string{"evt_restore_before"} {
		body := orderBody(id, "obj_"+id, 1)
		if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, a.Status, a.Raw)
		}
	}
	tn.waitState("orders:evt_restore_before", engine.StateDone)

	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	a := tn.do(req)
	if a.Status != http.StatusOK || len(a.Raw) == 0 {
		t.Fatalf("backup: %d, %d bytes", a.Status, len(a.Raw))
	}
	backup := []byte(a.Raw)
	backupFile := filepath.Join(t.TempDir(), "backup.db")
	mustWrite(t, backupFile, a.Raw)

	after := orderBody("evt_restore_after", "obj_after", 1)
	if a := tn.post("orders", after, tn.signed(after, "evt_restore_after")); a.Status != http.StatusAccepted {
		t.Fatalf("post after the backup: %d", a.Status)
	}
	tn.waitState("orders:evt_restore_after", engine.StateDone)

	setMaxRestore := func(n int) {
		t.Helper()
		mustWrite(t, tn.cfgPath, adminNodeConfig(tn.dir, "http://127.0.0.1:1", fmt.Sprintf("max_restore = \"%d\"", n)))
		tn.n.reload(tn.cfgPath)
		if got := int(tn.n.cfg.Load().Admin.MaxRestore); got != n {
			t.Fatalf("max_restore after reload: %d, want %d\n%s", got, n, tn.logs())
		}
	}
	restore := func(body io.Reader, length int64) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, tn.admin+"/v1/restore", body)
		req.ContentLength = length
		req.Header.Set("Authorization", "Bearer "+tn.token)
		return tn.do(req)
	}

	setMaxRestore(len(backup) - 1)
	for _, tt := range []struct {
		name string
		send func() (status int, msg string)
	}{
		{"length declared", func() (int, string) {
			a := restore(bytes.NewReader(backup), int64(len(backup)))
			return a.Status, a.Raw
		}},
		{"chunked", func() (int, string) {
			a := restore(io.MultiReader(bytes.NewReader(backup)), -1)
			return a.Status, a.Raw
		}},
		{"oncehook snapshot restore", func() (int, string) {
			var out, errOut bytes.Buffer
			err := run(ctxTimeout(t, 30*time.Second), []string{"snapshot", "restore", "-addr", tn.admin,
				"-token-file", filepath.Join(tn.dir, "admin.token"), backupFile}, &out, &errOut)
			if err == nil {
				return http.StatusOK, out.String()
			}
			if !strings.Contains(err.Error(), "restore: 413: ") {
				return 0, err.Error()
			}
			return http.StatusRequestEntityTooLarge, err.Error()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := tt.send()
			if status != http.StatusRequestEntityTooLarge || !strings.Contains(msg, fmt.Sprintf("backup is larger than admin.max_restore (%d); nothing restored", len(backup)-1)) {
				t.Fatalf("over max_restore: %d %s", status, msg)
			}
			if _, err := tn.event("orders:evt_restore_after"); err != nil {
				t.Fatalf("a refused restore changed the state: %v", err)
			}
			if left := restoreFiles(t, tn); len(left) != 0 {
				t.Fatalf("upload left behind: %v", left)
			}
		})
	}

	// At the bound, and slower than the read and write timeouts: restored.
	setMaxRestore(len(backup))
	pr, pw := io.Pipe()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		rest := backup
		for len(rest) > 0 {
			<-tick.C
			n := min(len(rest), len(backup)/25+1)
			if _, err := pw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		pw.Close()
	}()
	start := time.Now()
	a = restore(pr, -1)
	pr.Close()
	if a.Status != http.StatusOK {
		t.Fatalf("restore at the bound, uploaded over %v: %d %s", time.Since(start), a.Status, a.Raw)
	}
	if time.Since(start) < 2*time.Second {
		t.Fatalf("the upload took %v: not slower than the timeouts", time.Since(start))
	}
	waitUntil(t, "the restored state", func() bool {
		_, err := tn.event("orders:evt_restore_after")
		return errors.Is(err, engine.ErrNotFound)
	})
	if _, err := tn.event("orders:evt_restore_before"); err != nil {
		t.Fatalf("event from the backup: %v", err)
	}
	// The client command, which sends the length and waits for 100 Continue,
	// restores a backup within the bound.
	var out, errOut bytes.Buffer
	if err := run(ctxTimeout(t, 30*time.Second), []string{"snapshot", "restore", "-addr", tn.admin,
		"-token-file", filepath.Join(tn.dir, "admin.token"), backupFile}, &out, &errOut); err != nil || !strings.Contains(out.String(), "restored") ||
		!strings.Contains(out.String(), "again if they were delivered since") {
		t.Fatalf("oncehook snapshot restore within max_restore: %v\n%s", err, out.String())
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key (mode 0600) into dir.
func selfSigned(t *testing.T, dir string, serial int64) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "oncehook admin test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	mustWrite(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	mustWrite(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile, cert
}

func trusting(certs ...*x509.Certificate) *http.Transport {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
}

func TestAdminOverTLS(t *testing.T) {
	certDir := t.TempDir()
	certFile, keyFile, cert := selfSigned(t, certDir, 1)
	tn, _ := startAdminNode(t, fmt.Sprintf("tls_cert = %q\ntls_key = %q", certFile, keyFile))
	addr := tn.n.adminLn.Addr().String()
	if tn.admin != "https://"+addr {
		t.Fatalf("admin URL %s, want https", tn.admin)
	}
	tr := trusting(cert)
	t.Cleanup(tr.CloseIdleConnections)
	tn.client = &http.Client{Transport: tr, Timeout: 20 * time.Second}

	var st struct{ State string }
	if code := tn.adminGet("/v1/status", &st); code != http.StatusOK || st.State != "leader" {
		t.Fatalf("status over TLS: %d %+v", code, st)
	}
	// HTTP/1.1 only, to a client that offers HTTP/2 too (docs/security.md):
	// the listener's idle accounting sees requests, not HTTP/2's frames.
	h2 := trusting(cert)
	h2.ForceAttemptHTTP2 = true
	t.Cleanup(h2.CloseIdleConnections)
	if resp, err := (&http.Client{Transport: h2, Timeout: 20 * time.Second}).Get(tn.admin + "/livez"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.ProtoMajor != 1 {
			t.Fatalf("the admin listener answered over %s, want HTTP/1.1", resp.Proto)
		}
	}
	// Clear text is refused; so is a client that does not trust the certificate.
	if resp, err := http.Get("http://" + addr + "/v1/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the TLS listener: %d", resp.StatusCode)
		}
	}
	// net/http's line about it goes to the node's log, in its format (a
	// json log stays json), not to stderr.
	waitUntil(t, "the handshake error in the node's log", func() bool {
		return strings.Contains(tn.logs(), "TLS handshake error") && strings.Contains(tn.logs(), "client sent an HTTP request to an HTTPS server")
	})
	var unknown x509.UnknownAuthorityError
	if _, err := (&http.Client{Timeout: 10 * time.Second}).Get(tn.admin + "/livez"); !errors.As(err, &unknown) {
		t.Fatalf("a client without the CA: %v, want an unknown-authority error", err)
	}

	t.Run("ui cookies are Secure", func(t *testing.T) {
		u := newUIClient(t, tn)
		u.c.Transport = tr
		form := u.get("/ui/login")
		a := u.post("/ui/login", url.Values{"csrf": {formToken(t, form.body)}, "token": {tn.token}, "next": {"/ui/"}})
		if a.status != http.StatusSeeOther {
			t.Fatalf("sign-in over TLS: %d", a.status)
		}
		seen := map[string]bool{}
		for _, h := range []http.Header{form.header, a.header} {
			for _, c := range (&http.Response{Header: h}).Cookies() {
				seen[c.Name] = true
				if !c.Secure {
					t.Errorf("cookie %s (%q) is not Secure over TLS", c.Name, c.Value)
				}
			}
		}
		if !seen[uiSessionCookie] || !seen[uiLoginCookie] {
			t.Fatalf("cookies set: %v", seen)
		}
		if page := u.get("/ui/"); page.status != http.StatusOK {
			t.Fatalf("list over TLS: %d", page.status)
		}
	})

	tokenFile := filepath.Join(tn.dir, "admin.token")
	saved := filepath.Join(t.TempDir(), "saved.db")
	for _, tt := range []struct {
		name string
		env  string // ONCEHOOK_CA
		args []string
		err  string // "" for success
		out  string
	}{
		{"-ca, address without scheme", "", []string{"status", "-addr", addr, "-ca", certFile}, "", "leader"},
		{"https address, ONCEHOOK_CA", certFile, []string{"status", "-addr", "https://" + addr}, "", "leader"},
		{"https address, -ca", "", []string{"events", "-addr", "https://" + addr, "-ca", certFile}, "", "KEY"},
		{"https address, system roots only", "", []string{"status", "-addr", "https://" + addr}, "certificate signed by unknown authority (give the CA that signed the admin certificate with -ca or ONCEHOOK_CA)", ""},
		{"clear text to the TLS listener", "", []string{"status", "-addr", addr}, "(the admin listener speaks TLS: use https:// in the address, and -ca or ONCEHOOK_CA for its CA", ""},
		{"-ca with an http address", "", []string{"status", "-addr", "http://" + addr, "-ca", certFile}, "-ca (or ONCEHOOK_CA) is for https", ""},
		{"-ca that is no certificate", "", []string{"status", "-addr", addr, "-ca", tokenFile}, "holds no PEM certificate", ""},
		{"snapshot save", "", []string{"snapshot", "save", "-addr", addr, "-ca", certFile, saved}, "", "saved " + saved},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ONCEHOOK_CA", tt.env)
			t.Setenv("ONCEHOOK_TOKEN_FILE", tokenFile)
			var out, errOut bytes.Buffer
			err := run(ctxTimeout(t, 30*time.Second), tt.args, &out, &errOut)
			if tt.err == "" {
				if err != nil || !strings.Contains(out.String(), tt.out) {
					t.Fatalf("%v: %v\n%s%s", tt.args, err, out.String(), errOut.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("%v: err %v, want %q", tt.args, err, tt.err)
			}
		})
	}
	if fi, err := os.Stat(saved); err != nil || fi.Size() == 0 {
		t.Fatalf("snapshot saved over TLS: %v", err)
	}

	// A renewed certificate in the same files is served after SIGHUP,
	// without a restart.
	_, _, renewed := selfSigned(t, certDir, 2)
	tn.n.reload(tn.cfgPath)
	tr2 := trusting(cert, renewed)
	defer tr2.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr2, Timeout: 10 * time.Second}).Get(tn.admin + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 2 {
		t.Fatalf("after reload the listener serves certificate %d, want the renewed 2\n%s", got, tn.logs())
	}
	if !strings.Contains(tn.logs(), "admin tls files (re-read)") {
		t.Fatalf("the reload's log does not say the admin TLS files were re-read:\n%s", tn.logs())
	}
	// Reloaded again with the same files: nothing of them to name.
	before := strings.Count(tn.logs(), "admin tls files (re-read)")
	tn.n.reload(tn.cfgPath)
	if after := strings.Count(tn.logs(), "admin tls files (re-read)"); after != before {
		t.Fatalf("a reload with unchanged TLS files names them as re-read:\n%s", tn.logs())
	}
}

// TestValidateWarnsOfPlaintextAdmin: `oncehook validate` prints the warning
// for an admin listener beyond loopback without TLS, and still exits 0.
func TestValidateWarnsOfPlaintextAdmin(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir, 1)
	for _, tt := range []struct {
		admin string
		warn  bool
	}{
		{`listen = "127.0.0.1:7071"`, false},
		{`listen = "0.0.0.0:7071"`, true},
		{`listen = "10.1.2.3:7071"`, true},
		{fmt.Sprintf("listen = \"0.0.0.0:7071\"\ntls_cert = %q\ntls_key = %q", certFile, keyFile), false},
	} {
		path := filepath.Join(dir, "oncehook.toml")
		mustWrite(t, path, "[admin]\n"+tt.admin+"\n")
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"validate", "-config", path}, &out, &errOut); err != nil {
			t.Fatalf("%s: validate: %v", tt.admin, err)
		}
		warned := strings.Contains(out.String(), ": warning: admin.listen: ") && strings.Contains(out.String(), "without TLS")
		if warned != tt.warn || !strings.Contains(out.String(), ": ok (") {
			t.Errorf("%s: validate printed\n%s", tt.admin, out.String())
		}
	}
}

// errorJSON is the admin API's error body.
func errorJSON(t *testing.T, raw string) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		t.Fatalf("not a JSON error: %q", raw)
	}
	return e.Error
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRestoreOfATruncatedBackupIsRefused: a backup cut short (an interrupted
// copy, a full disk) is refused with 400 and changes nothing; it used to
// kill the node with SIGBUS while the file was checked. Restore files a
// stopped process left in data_dir are removed at the next start.
func TestRestoreOfATruncatedBackupIsRefused(t *testing.T) {
	tn, _ := startAdminNode(t, "")
	for i := range 20 {
		id := fmt.Sprintf("evt_trunc_%d", i)
		body := orderBody(id, "obj_"+id, 1)
		if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, a.Status, a.Raw)
		}
	}
	tn.waitState("orders:evt_trunc_19", engine.StateDone)
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	a := tn.do(req)
	if a.Status != http.StatusOK || len(a.Raw) < 3*4096 {
		t.Fatalf("backup: %d, %d bytes", a.Status, len(a.Raw))
	}
	backup := []byte(a.Raw)
	for _, n := range []int{8192, len(backup) / 2, len(backup) - 4096} {
		req, _ := http.NewRequest(http.MethodPost, tn.admin+"/v1/restore", bytes.NewReader(backup[:n]))
		req.Header.Set("Authorization", "Bearer "+tn.token)
		a := tn.do(req)
		if a.Status != http.StatusBadRequest || !strings.Contains(a.Raw, "the uploaded backup is ") || !strings.Contains(a.Raw, "truncated") ||
			strings.Contains(a.Raw, "restore-") {
			t.Fatalf("restore of the first %d of %d bytes: %d %s, want 400 naming a truncated copy, without the spool's path", n, len(backup), a.Status, a.Raw)
		}
		if _, err := tn.event("orders:evt_trunc_19"); err != nil {
			t.Fatalf("a refused restore changed the state: %v", err)
		}
		if left := restoreFiles(t, tn); len(left) != 0 {
			t.Fatalf("upload left behind: %v", left)
		}
	}

	// An empty upload (a save that failed before writing) says so.
	req, _ = http.NewRequest(http.MethodPost, tn.admin+"/v1/restore", bytes.NewReader(nil))
	req.Header.Set("Authorization", "Bearer "+tn.token)
	if a := tn.do(req); a.Status != http.StatusBadRequest || !strings.Contains(a.Raw, "the uploaded backup is empty (0 bytes)") {
		t.Fatalf("restore of an empty file: %d %s, want 400 saying it is empty", a.Status, a.Raw)
	}
	if _, err := tn.event("orders:evt_trunc_19"); err != nil {
		t.Fatalf("an empty restore changed the state: %v", err)
	}

	// What a process killed during a restore would leave.
	stale := []string{filepath.Join(tn.dir, "data", "restore-123.db"), filepath.Join(tn.dir, "data", "fsm.db.restore-456")}
	for _, p := range stale {
		mustWrite(t, p, "partial upload")
	}
	tn.stop()
	tn.start()
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after a restart: %v, want it removed", p, err)
		}
	}
}
