package main

// Tests of the files in deploy/, each with the real program: Debian's
// nginx and caddy in front of a real chatrelay on loopback ports, and
// systemd-analyze on the unit. .ci/packages installs them; a missing one
// fails the test rather than skipping it.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// deployFile reads a file of the repository's deploy folder.
func deployFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	assert.Success(t, err)
	return string(b)
}

// deploySubst replaces the lines of a deploy file that are marked
// "(test)": each such line's text before its comment must be a key of repl
// and is replaced by its value ("" deletes the line). Every key must be
// used, and no other line changes, so the tested file is the shipped one.
func deploySubst(t *testing.T, text string, repl map[string]string) string {
	t.Helper()
	used := make(map[string]bool)
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.Contains(line, "(test)") || strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
			continue
		}
		code, _, _ := strings.Cut(line, "#")
		code = strings.TrimSpace(code)
		v, ok := repl[code]
		if !ok {
			t.Fatalf("deploy file line %q is marked (test) but the test has no substitute for it", line)
		}
		used[code] = true
		if v != "" {
			out = append(out, v)
		}
	}
	for k := range repl {
		if !used[k] {
			t.Fatalf("deploy file has no (test) line %q", k)
		}
	}
	return strings.Join(out, "\n")
}

// deployLook finds a program, failing (not skipping) if it is missing.
func deployLook(t *testing.T, name, fallback string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	t.Fatalf("%s is not installed; .ci/packages lists it and .ci/test installs it", name)
	return ""
}

// deployFreePort returns a loopback port that was free a moment ago.
func deployFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// deployStart starts a program; cleanup stops it with SIGTERM (SIGKILL
// after 10s). exited is closed when it ends.
func deployStart(t *testing.T, logFile string, env []string, name string, args ...string) (exited <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	log, err := os.Create(logFile)
	assert.Success(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	assert.Success(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return done
}

// deployClient is an HTTPS client whose connections come from the
// loopback address src (Linux answers for all of 127.0.0.0/8), so a
// proxy's client is told apart from the proxy itself (127.0.0.1).
// HTTP/2 when h2, else HTTP/1.1 only, as a browser opens a WebSocket.
func deployClient(pool *x509.CertPool, src string, h2 bool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tc := &tls.Config{RootCAs: pool}
	if !h2 {
		tc.NextProtos = []string{"http/1.1"}
	}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: tc, ForceAttemptHTTP2: h2}}
}

// deployWaitUp waits until base answers /healthz through the proxy.
func deployWaitUp(t *testing.T, base string, pool *x509.CertPool, exited <-chan struct{}, logFile string) {
	t.Helper()
	c := deployClient(pool, "127.0.0.1", false)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile)
			t.Fatalf("the proxy exited; its log:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("the proxy did not answer within 30s (last: %v); its log:\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// deployThroughProxy checks a proxy at base (HTTPS) in front of a chatrelay
// run with --trusted-proxy 127.0.0.1 --rate-ip 2: an SSE subscriber (over
// HTTP/2) and a WebSocket subscriber (with a browser's Origin) both get a
// posted message within a second, so nothing buffers; the rate window
// counts each client's own address, not the proxy's, whatever
// X-Forwarded-For a client sends; /metrics is not served; an upload of the
// largest attachment passes.
func deployThroughProxy(t *testing.T, base string, pool *x509.CertPool) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	h2 := deployClient(pool, "127.0.0.4", true)
	h1 := deployClient(pool, "127.0.0.4", false)
	defer h2.CloseIdleConnections()
	defer h1.CloseIdleConnections()

	tok := opsToken("through a proxy")
	sse := opsOpenSSE(t, ctx, h2, base, tok)
	assert.Equal(t, "SSE protocol to the proxy", sse.resp.Proto, "HTTP/2.0")
	ws := opsDialWS(t, ctx, h1, "wss"+strings.TrimPrefix(base, "https")+"/api/chat/ws", tok, http.Header{"Origin": {base}})
	sseGot, wsGot := make(chan string, 1), make(chan string, 1)
	go func() {
		d, err := sse.next()
		if err != nil {
			d = "error: " + err.Error()
		}
		sseGot <- d
	}()
	go func() {
		_, b, err := ws.Read(ctx)
		if err != nil {
			b = []byte("error: " + err.Error())
		}
		wsGot <- string(b)
	}()
	posted := time.Now()
	assert.Equal(t, "post", opsPost(t, ctx, h1, base, tok, "pushed through the proxy", nil), http.StatusCreated)
	deadline := time.NewTimer(time.Until(posted.Add(time.Second)))
	defer deadline.Stop()
	for _, sub := range []struct {
		name string
		got  chan string
	}{{"SSE", sseGot}, {"WebSocket", wsGot}} {
		select {
		case d := <-sub.got:
			assert.True(t, strings.Contains(d, `"text":"pushed through the proxy"`), "%s got %s", sub.name, d)
		case <-deadline.C:
			t.Fatalf("the %s subscriber did not get the message within a second: something buffers", sub.name)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// --rate-ip 2: two posts from 127.0.0.2, then it is over its window;
	// 127.0.0.3 has its own, even when it claims to be 127.0.0.2. (Had the
	// window counted the proxy's address, 127.0.0.4's post above would have
	// used it up already.)
	c2, c3 := deployClient(pool, "127.0.0.2", false), deployClient(pool, "127.0.0.3", false)
	defer c2.CloseIdleConnections()
	defer c3.CloseIdleConnections()
	assert.Equal(t, ".2 first", opsPost(t, ctx, c2, base, opsToken("r1"), "one", nil), http.StatusCreated)
	assert.Equal(t, ".2 second", opsPost(t, ctx, c2, base, opsToken("r2"), "two", nil), http.StatusCreated)
	assert.Equal(t, ".2 third", opsPost(t, ctx, c2, base, opsToken("r3"), "three", nil), http.StatusTooManyRequests)
	spoof := http.Header{"X-Forwarded-For": {"127.0.0.2"}}
	assert.Equal(t, ".3 first", opsPost(t, ctx, c3, base, opsToken("r4"), "four", spoof), http.StatusCreated)
	assert.Equal(t, ".3 second", opsPost(t, ctx, c3, base, opsToken("r5"), "five", nil), http.StatusCreated)
	assert.Equal(t, ".3 third", opsPost(t, ctx, c3, base, opsToken("r6"), "six", spoof), http.StatusTooManyRequests)

	resp, err := h1.Get(base + "/metrics")
	assert.Success(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, "/metrics through the proxy", resp.StatusCode, http.StatusNotFound)

	// The largest attachment the server takes (--max-attachment-bytes,
	// 10 MiB by default) passes the proxy: nginx refuses a body over 1 MiB
	// (its client_max_body_size) unless the site raises it.
	size := chatrelay.LimitAttachmentBytes.Max
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat/attachments", bytes.NewReader(bytes.Repeat([]byte{'x'}, size)))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", opsToken("an upload through a proxy"))
	req.Header.Set("X-Filename", "build.log")
	req.Header.Set("Content-Type", "text/plain")
	resp, err = h2.Do(req)
	assert.Success(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, fmt.Sprintf("a %d-byte upload through the proxy (%.200s)", size, answer), resp.StatusCode, http.StatusCreated)
}

// TestNginx runs Debian's nginx with deploy/nginx.conf in front of
// chatrelay.
func TestNginx(t *testing.T) {
	t.Parallel()
	bin := deployLook(t, "nginx", "/usr/sbin/nginx")
	conf := deployFile(t, "nginx.conf")

	// Its stream timeouts stay above the default heartbeat (20s).
	for _, m := range regexp.MustCompile(`(proxy_(?:read|send)_timeout)\s+(\d+)s;`).FindAllStringSubmatch(conf, -1) {
		n, _ := strconv.Atoi(m[2])
		assert.True(t, n >= 3*20, "%s %ds: want at least three heartbeats (60s)", m[1], n)
	}
	for _, want := range []string{"proxy_buffering off;", "proxy_set_header Upgrade $http_upgrade;", "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;"} {
		assert.True(t, strings.Contains(conf, want), "nginx.conf lacks %q", want)
	}

	srv := opsServe(t, "--trusted-proxy", "127.0.0.1", "--rate-ip", "2")
	upstream := strings.TrimPrefix(srv.base, "http://")
	cert, key, pool := opsCert(t)
	port := deployFreePort(t)
	dir := t.TempDir()
	site := deploySubst(t, conf, map[string]string{
		"server 127.0.0.1:8080;":     "server " + upstream + ";",
		"listen 443 ssl http2;":      fmt.Sprintf("listen 127.0.0.1:%d ssl http2;", port),
		"listen [::]:443 ssl http2;": "",
		"ssl_certificate     /etc/letsencrypt/live/chat.example.com/fullchain.pem;": "ssl_certificate " + cert + ";",
		"ssl_certificate_key /etc/letsencrypt/live/chat.example.com/privkey.pem;":   "ssl_certificate_key " + key + ";",
		"access_log /var/log/nginx/access.log chatrelay;":                           "access_log " + dir + "/site-access.log chatrelay;",
	})
	assert.Success(t, os.WriteFile(filepath.Join(dir, "chatrelay.conf"), []byte(site), 0o600))
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers keep access to the temp folder
	}
	main := fmt.Sprintf(`daemon off;
%[2]s
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/chatrelay.conf;
}
`, dir, user)
	assert.Success(t, os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o600))
	logFile := filepath.Join(dir, "error.log")
	exited := deployStart(t, filepath.Join(dir, "stderr.log"), os.Environ(), bin,
		"-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", logFile)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	deployWaitUp(t, base, pool, exited, logFile)
	deployThroughProxy(t, base, pool)

	// The access log never holds a ticket: a request with one in its
	// address is logged by its path alone.
	c := deployClient(pool, "127.0.0.4", false)
	defer c.CloseIdleConnections()
	tok := opsToken("a ticket through nginx")
	assert.Equal(t, "post", opsPost(t, t.Context(), c, base, tok, "hello", nil), http.StatusCreated)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/api/chat/ticket", nil)
	req.Header.Set("X-Chat-Token", tok)
	resp, err := c.Do(req)
	assert.Success(t, err)
	var minted struct{ Ticket string }
	assert.Success(t, json.NewDecoder(resp.Body).Decode(&minted))
	resp.Body.Close()
	assert.True(t, minted.Ticket != "", "no ticket minted through the proxy")
	resp, err = c.Get(base + "/api/chat/attachments/at_000000000000?ticket=" + url.QueryEscape(minted.Ticket))
	assert.Success(t, err)
	resp.Body.Close()
	accessLog := filepath.Join(dir, "site-access.log")
	var logged string
	opsWait(t, "the attachment request in nginx's access log", func() bool {
		b, _ := os.ReadFile(accessLog)
		logged = string(b)
		return strings.Contains(logged, "GET /api/chat/attachments/at_000000000000")
	})
	assert.True(t, !strings.Contains(logged, minted.Ticket) && !strings.Contains(logged, "ticket="), "nginx's access log holds a ticket:\n%s", logged)
}

// TestCaddy runs Debian's caddy with deploy/Caddyfile in front of
// chatrelay.
func TestCaddy(t *testing.T) {
	t.Parallel()
	bin := deployLook(t, "caddy", "/usr/bin/caddy")
	srv := opsServe(t, "--trusted-proxy", "127.0.0.1", "--rate-ip", "2")
	upstream := strings.TrimPrefix(srv.base, "http://")
	cert, key, pool := opsCert(t)
	port := deployFreePort(t)
	dir := t.TempDir()
	site := deploySubst(t, deployFile(t, "Caddyfile"), map[string]string{
		"chat.example.com {":             fmt.Sprintf("https://127.0.0.1:%d {\n\tbind 127.0.0.1\n\ttls %s %s", port, cert, key),
		"reverse_proxy 127.0.0.1:8080 {": "reverse_proxy " + upstream + " {",
	})
	// Global options for a test: no admin endpoint, no redirect listener
	// on :80, state in the temp folder.
	global := fmt.Sprintf("{\n\tadmin off\n\tauto_https disable_redirects\n\tstorage file_system %s/storage\n}\n\n", dir)
	caddyfile := filepath.Join(dir, "Caddyfile")
	assert.Success(t, os.WriteFile(caddyfile, []byte(global+site), 0o600))
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir+"/data", "XDG_CONFIG_HOME="+dir+"/config")
	logFile := filepath.Join(dir, "caddy.log")
	exited := deployStart(t, logFile, env, bin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	deployWaitUp(t, base, pool, exited, logFile)
	deployThroughProxy(t, base, pool)
}

// TestSystemdUnit checks deploy/chatrelay.service with systemd-analyze
// (no warnings from verify; an exposure score of at most 2.0 from
// security), that it has the hardening the README promises, and that its
// ExecStart is a command line serve accepts and runs.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	bin := deployLook(t, "systemd-analyze", "/usr/bin/systemd-analyze")
	unit := deployFile(t, "chatrelay.service")
	for _, want := range []string{
		"\nUser=chatrelay\n", "\nStateDirectory=chatrelay\n", "\nNoNewPrivileges=yes\n", "\nProtectSystem=strict\n",
		"\nReadWritePaths=/var/lib/chatrelay\n", "\nLimitNOFILE=", "\nExecStart=/usr/local/bin/chatrelay serve ",
	} {
		assert.True(t, strings.Contains(unit, want), "the unit lacks %q", strings.TrimSpace(want))
	}

	// verify wants the binary to exist: point it at this test binary.
	exe, err := os.Executable()
	assert.Success(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "chatrelay.service")
	assert.Success(t, os.WriteFile(path, []byte(strings.ReplaceAll(unit, "ExecStart=/usr/local/bin/chatrelay ", "ExecStart="+exe+" ")), 0o644))
	out, err := exec.Command(bin, "verify", "--man=no", path).CombinedOutput()
	assert.True(t, err == nil && len(strings.TrimSpace(string(out))) == 0, "systemd-analyze verify: %v\n%s", err, out)
	out, err = exec.Command(bin, "security", "--offline=true", path).CombinedOutput()
	assert.Success(t, err)
	m := regexp.MustCompile(`Overall exposure level for chatrelay\.service: (\d+\.\d+)`).FindSubmatch(out)
	assert.True(t, m != nil, "no exposure level in:\n%s", out)
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	assert.True(t, score <= 2.0, "exposure level %.1f, want at most 2.0:\n%s", score, out)

	// The ExecStart line, with its addresses and folder moved to the
	// test's, starts a server that becomes ready.
	start := regexp.MustCompile(`(?m)^ExecStart=((?:.*\\\n)*.*)$`).FindStringSubmatch(unit)
	assert.True(t, start != nil, "no ExecStart")
	fields := strings.Fields(strings.ReplaceAll(start[1], "\\\n", " "))
	assert.Equal(t, "ExecStart program", fields[:2], []string{"/usr/local/bin/chatrelay", "serve"})
	args := fields[2:]
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--addr", "--metrics-addr":
			args[i+1] = "127.0.0.1:0"
		case "--data":
			args[i+1] = t.TempDir()
		}
	}
	srv := opsServe(t, args...)
	assert.True(t, srv.metrics != "", "the unit's server has no --metrics-addr")
	opsWait(t, "the unit's server to be ready", func() bool { s, _ := opsGet(t, srv.metrics+"/readyz"); return s == http.StatusOK })
}
