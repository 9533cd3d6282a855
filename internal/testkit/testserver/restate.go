package testserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/restateid"
)

// Restate is a private restate-server: one node with its ingress, admin and
// node ports on free loopback ports and its data in a temporary directory,
// kept across Kill and Start.
type Restate struct {
	// IngressURL and AdminURL are http://127.0.0.1:port.
	IngressURL string
	AdminURL   string
	// IdentityKey is the public key restate-server signs its requests to
	// endpoints with; endpoints verify them with it (WithIdentityV1, or the
	// worker's UNKEY_RESTATE_IDENTITY_KEYS).
	IdentityKey string
	proc        process
}

// restateBinary finds the restate-server binary that `npm ci` installs into
// node_modules at the repository root (the npm package ships it), or one on
// PATH.
func restateBinary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		bin := filepath.Join(dir, "node_modules", "@restatedev", "restate-server-linux-x64", "bin", "restate-server")
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return exec.LookPath("restate-server")
}

// StartRestate starts a restate-server and stops it when the test ends,
// with env (RESTATE_* settings, such as a shrunk retry budget) added to its
// environment. It fails the test when the binary is missing (make test
// installs it with npm ci).
func StartRestate(t testing.TB, env ...string) *Restate {
	t.Helper()
	bin, err := restateBinary()
	if err != nil {
		t.Fatalf("restate-server is not installed (make test runs npm ci): %v", err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "identity.pem")
	identityKey, err := restateid.WriteKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	r := &Restate{IdentityKey: identityKey}
	r.proc = process{t: t, name: bin, log: filepath.Join(dir, "restate.log"), args: []string{"--no-logo"}}
	t.Cleanup(r.Kill)
	attempt := 0
	r.proc.startOnFreePorts(func() {
		attempt++
		ingress, admin, node := FreePort(t), FreePort(t), FreePort(t)
		r.IngressURL = "http://127.0.0.1:" + strconv.Itoa(ingress)
		r.AdminURL = "http://127.0.0.1:" + strconv.Itoa(admin)
		r.proc.env = []string{
			// A fresh base directory per attempt: the node remembers its
			// address there.
			"RESTATE_BASE_DIR=" + filepath.Join(dir, "base"+strconv.Itoa(attempt)),
			"RESTATE_NODE_NAME=test",
			"RESTATE_LISTEN_MODE=tcp",
			"RESTATE_BIND_ADDRESS=127.0.0.1:" + strconv.Itoa(node),
			"RESTATE_ADVERTISED_ADDRESS=http://127.0.0.1:" + strconv.Itoa(node),
			"RESTATE_INGRESS__BIND_ADDRESS=127.0.0.1:" + strconv.Itoa(ingress),
			"RESTATE_ADMIN__BIND_ADDRESS=127.0.0.1:" + strconv.Itoa(admin),
			"RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE=" + keyFile,
			"RESTATE_LOG_FORMAT=compact",
			"RESTATE_LOG_DISABLE_ANSI_CODES=true",
		}
		r.proc.env = append(r.proc.env, env...)
	}, r.healthy, 60*time.Second)
	return r
}

// Start starts the server again after Kill, with the same data.
func (r *Restate) Start() {
	r.proc.t.Helper()
	r.proc.start(r.healthy, 60*time.Second)
}

func (r *Restate) healthy() error {
	for _, u := range []string{r.AdminURL + "/health", r.IngressURL + "/restate/health"} {
		resp, err := http.Get(u)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", u, resp.Status)
		}
	}
	return nil
}

// Kill kills the server at once, as a crash would.
func (r *Restate) Kill() { r.proc.signal(syscall.SIGKILL) }

// Endpoint serves a Restate service endpoint's handler on a free loopback
// port (HTTP/2 without TLS, as restate-server calls it). Kill and Start
// simulate a worker crash and restart on the same address.
type Endpoint struct {
	URL     string
	addr    string
	handler http.Handler
	srv     *http.Server
	t       testing.TB
}

// ServeEndpoint serves handler and registers it with r.
func ServeEndpoint(t testing.TB, r *Restate, handler http.Handler) *Endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the kernel's free port, held
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	e := &Endpoint{URL: "http://" + addr, addr: addr, handler: handler, t: t}
	e.serve(ln)
	t.Cleanup(e.Kill)
	if _, err := r.Post(r.AdminURL+"/deployments", `{"uri":"`+e.URL+`"}`); err != nil {
		t.Fatalf("register endpoint: %v", err)
	}
	return e
}

// Start serves the endpoint again, on the same address.
func (e *Endpoint) Start() {
	e.t.Helper()
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		e.t.Fatalf("listen on %s: %v", e.addr, err)
	}
	e.serve(ln)
}

func (e *Endpoint) serve(ln net.Listener) {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	e.srv = &http.Server{Handler: e.handler, Protocols: &protocols}
	go e.srv.Serve(ln)
}

// SetHandler replaces the handler served from the next Start: a restarted
// worker is a new process with new state.
func (e *Endpoint) SetHandler(h http.Handler) { e.handler = h }

// Kill closes the endpoint and every connection at once, cutting off
// invocations in flight, as a crash would.
func (e *Endpoint) Kill() {
	if e.srv != nil {
		e.srv.Close()
	}
}

// Post sends a JSON body (none if body is empty, as handlers without input
// require) and returns the response body; a status of 300 or more is an
// error.
func (r *Restate) Post(url, body string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 300 {
		return string(b), fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// Call invokes a handler through the ingress (path such as
// "/Cleanup/key/Status", body "" for none) and decodes its JSON answer into
// out.
func (r *Restate) Call(path, body string, out any) error {
	raw, err := r.Post(r.IngressURL+path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		return fmt.Errorf("decode answer of %s %q: %w", path, raw, err)
	}
	return nil
}

// Query runs SQL against restate-server's introspection tables (such as
// sys_invocation) and returns the rows.
func (r *Restate) Query(sql string) ([]map[string]any, error) {
	q, _ := json.Marshal(map[string]string{"query": sql})
	out, err := r.Post(r.AdminURL+"/query", string(q))
	if err != nil {
		return nil, err
	}
	var res struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("decode query result %q: %w", out, err)
	}
	return res.Rows, nil
}
