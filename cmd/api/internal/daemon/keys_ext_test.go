package daemon_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/command"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// keysPoll is the override (and keys) poll interval of the tests'
// servers.
const keysPoll = 100 * time.Millisecond

// cliKey runs api keys create|generate with args against environ and
// returns what its last line holds.
func cliKey(t *testing.T, environ []string, args ...string) (keyID, key string, out string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := command.Keys(context.Background(), environ, &stdout, &stderr, args); err != nil {
		t.Fatalf("api keys %v: %v\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var last struct{ KeyID, Key string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.KeyID == "" || last.Key == "" {
		t.Fatalf("api keys %v: last line %q: %v", args, lines[len(lines)-1], err)
	}
	return last.KeyID, last.Key, stdout.String()
}

// rpc posts a Connect JSON call of service/method and returns the status,
// the decoded answer and the answer's headers.
func (ts *testServer) rpc(t *testing.T, service, method, token, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1."+service+"/"+method, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s/%s answered %d with %q", service, method, resp.StatusCode, raw)
	}
	return resp.StatusCode, out, resp.Header
}

// TestKeysAcrossProcesses: the first key comes from api keys create; with
// it, one process creates a narrower key that another process accepts
// within its poll; the narrow key is refused what it lacks, naming the
// permission; a revocation on one process is refused by the other; every
// change is in the audit log with its actor and request id; an expired key
// is refused; and no table, and no log line, holds a key.
func TestKeysAcrossProcesses(t *testing.T) {
	t.Parallel()
	m, sqlDB := dbtest.Start(t)
	env := []string{"UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_OVERRIDES_POLL_INTERVAL=" + keysPoll.String()}
	adminID, admin, _ := cliKey(t, env, "create", "--workspace", "ws_k", "--name", "admin", "--permissions",
		"keys.manage, audit.read, ratelimit.*.limit, ratelimit.*.set_override, ratelimit.*.read_override, ratelimit.*.delete_override")
	var logA, logB loopback.Log
	a := startServerLogging(t, slog.New(slog.NewJSONHandler(&logA, &slog.HandlerOptions{Level: slog.LevelDebug})), env...)
	b := startServerLogging(t, slog.New(slog.NewJSONHandler(&logB, &slog.HandlerOptions{Level: slog.LevelDebug})), env...)

	// The CLI's key works on both from the start.
	for _, ts := range []*testServer{a, b} {
		if status, out := ts.call(t, "Limit", admin, `{"namespace":"api","identifier":"u","limit":5,"duration":60000}`); status != 200 || out["success"] != true {
			t.Fatalf("the CLI's key: %d %v", status, out)
		}
		if status, _ := ts.call(t, "Limit", "", `{"namespace":"api","identifier":"u","limit":5,"duration":60000}`); status != 401 {
			t.Fatalf("a call without a key once keys exist: %d, want 401", status)
		}
	}

	status, created, hdr := a.rpc(t, "KeyService", "CreateKey", admin, `{"name":"gateway","permissions":["ratelimit.api.limit"]}`)
	if status != 200 || created["keyId"] == nil || hdr.Get("Request-Id") == "" {
		t.Fatalf("CreateKey: %d %v", status, created)
	}
	gatewayID, gateway := created["keyId"].(string), created["key"].(string)
	createReq := hdr.Get("Request-Id")
	began := time.Now()
	poll.Until(t, 10*time.Second, "the other process to accept the new key", func() bool {
		status, _ := b.call(t, "Limit", gateway, `{"namespace":"api","identifier":"g","limit":5,"duration":60000}`)
		return status == 200
	})
	t.Logf("a key created on A was accepted by B after %v (poll interval %v)", time.Since(began).Round(time.Millisecond), keysPoll)

	// What the gateway key lacks, named; nothing changed.
	status, out := b.call(t, "SetOverride", gateway, `{"namespace":"api","identifier":"g","limit":1000000000,"duration":60000}`)
	if status != 403 || out["code"] != "permission_denied" || !strings.Contains(out["message"].(string), "ratelimit.api.set_override") {
		t.Fatalf("SetOverride with a limit-only key: %d %v", status, out)
	}
	status, out = b.call(t, "Limit", gateway, `{"namespace":"billing","identifier":"g","limit":5,"duration":60000}`)
	if status != 403 || !strings.Contains(out["message"].(string), "ratelimit.billing.limit") {
		t.Fatalf("Limit in another namespace: %d %v", status, out)
	}
	status, out = b.call(t, "MultiLimit", gateway, `{"limits":[{"namespace":"api","identifier":"g","limit":5,"duration":60000},`+
		`{"namespace":"billing","identifier":"g","limit":5,"duration":60000}]}`)
	if status != 403 || !strings.Contains(out["message"].(string), "ratelimit.billing.limit") {
		t.Fatalf("MultiLimit naming a namespace the key lacks: %d %v", status, out)
	}
	if _, out := b.call(t, "Limit", gateway, `{"namespace":"api","identifier":"g","limit":5,"duration":60000,"cost":0}`); fmt.Sprint(out["remaining"]) != "4" {
		t.Fatalf("the refused MultiLimit counted: %v", out)
	}
	if status, _, _ := b.rpc(t, "KeyService", "ListKeys", gateway, `{}`); status != 403 {
		t.Fatalf("ListKeys without keys.manage: %d", status)
	}
	// A key manager cannot mint a key beyond itself.
	if status, out, _ := a.rpc(t, "KeyService", "CreateKey", admin, `{"name":"x","permissions":["ratelimit.*.read_analytics"]}`); status != 403 ||
		!strings.Contains(out["message"].(string), "ratelimit.*.read_analytics") {
		t.Fatalf("granting a permission the caller lacks: %d %v", status, out)
	}

	// Override changes by the admin key, audited.
	if status, _ := b.call(t, "SetOverride", admin, `{"namespace":"api","identifier":"vip","limit":100,"duration":60000}`); status != 200 {
		t.Fatalf("SetOverride: %d", status)
	}
	if status, _ := b.call(t, "SetOverride", admin, `{"namespace":"api","identifier":"vip","limit":200,"duration":60000}`); status != 200 {
		t.Fatalf("SetOverride again: %d", status)
	}
	if status, _ := b.call(t, "DeleteOverride", admin, `{"namespace":"api","identifier":"vip"}`); status != 200 {
		t.Fatalf("DeleteOverride: %d", status)
	}

	// Revoked on A, refused by B.
	status, revoked, hdr := a.rpc(t, "KeyService", "RevokeKey", admin, `{"keyId":"`+gatewayID+`"}`)
	if status != 200 || revoked["key"].(map[string]any)["revokedAt"] == nil {
		t.Fatalf("RevokeKey: %d %v", status, revoked)
	}
	revokeReq := hdr.Get("Request-Id")
	began = time.Now()
	poll.Until(t, 10*time.Second, "the other process to refuse the revoked key", func() bool {
		status, _ := b.call(t, "Limit", gateway, `{"namespace":"api","identifier":"g","limit":5,"duration":60000}`)
		return status == 401
	})
	t.Logf("a key revoked on A was refused by B after %v", time.Since(began).Round(time.Millisecond))

	// The audit log, read on B.
	list := func(filter string) []any {
		t.Helper()
		status, out, _ := b.rpc(t, "AuditService", "ListAuditLog", admin, filter)
		if status != 200 {
			t.Fatalf("ListAuditLog(%s): %d %v", filter, status, out)
		}
		entries, _ := out["entries"].([]any)
		return entries
	}
	entries := list(`{}`)
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.(map[string]any)["action"].(string))
	}
	if want := "key.revoke override.delete override.update override.create key.create key.create"; strings.Join(actions, " ") != want {
		t.Fatalf("audit actions %v, want %s", actions, want)
	}
	cli := list(`{"actor":"cli"}`)
	if len(cli) != 1 || cli[0].(map[string]any)["target"] != adminID {
		t.Fatalf("entries by the CLI: %v", cli)
	}
	byKey := list(`{"target":"` + gatewayID + `"}`)
	if len(byKey) != 2 || byKey[0].(map[string]any)["requestId"] != revokeReq || byKey[1].(map[string]any)["requestId"] != createReq ||
		byKey[0].(map[string]any)["actor"] != adminID {
		t.Fatalf("the gateway key's entries: %v (request ids %s, %s)", byKey, revokeReq, createReq)
	}
	upd := list(`{"action":"override.update"}`)
	if len(upd) != 1 || !strings.Contains(upd[0].(map[string]any)["before"].(string), `"limit":100`) ||
		!strings.Contains(upd[0].(map[string]any)["after"].(string), `"limit":200`) {
		t.Fatalf("the override update's entry: %v", upd)
	}
	page1 := func() map[string]any {
		_, out, _ := b.rpc(t, "AuditService", "ListAuditLog", admin, `{"limit":4}`)
		return out
	}()
	if len(page1["entries"].([]any)) != 4 || page1["cursor"] == nil {
		t.Fatalf("a first page of 4: %v", page1)
	}
	if rest := list(`{"limit":4,"cursor":"` + page1["cursor"].(string) + `"}`); len(rest) != 2 {
		t.Fatalf("the second page: %v", rest)
	}
	if status, out, _ := b.rpc(t, "AuditService", "ListAuditLog", admin, `{"action":"key.delete"}`); status != 400 ||
		!strings.Contains(out["message"].(string), "action") {
		t.Fatalf("an unknown action: %d %v", status, out)
	}

	// An expired key.
	status, created, _ = a.rpc(t, "KeyService", "CreateKey", admin,
		fmt.Sprintf(`{"name":"short","permissions":["ratelimit.api.limit"],"expiresAt":"%d"}`, time.Now().Add(1500*time.Millisecond).UnixMilli()))
	if status != 200 {
		t.Fatalf("CreateKey with an expiry: %d %v", status, created)
	}
	short := created["key"].(string)
	poll.Until(t, 10*time.Second, "the expiring key to work on B", func() bool {
		status, _ := b.call(t, "Limit", short, `{"namespace":"api","identifier":"s","limit":5,"duration":60000}`)
		return status == 200
	})
	poll.Until(t, 10*time.Second, "the key to expire", func() bool {
		status, out := b.call(t, "Limit", short, `{"namespace":"api","identifier":"s","limit":5,"duration":60000}`)
		return status == 401 && strings.Contains(out["message"].(string), "expired")
	})

	// No table holds a key, and no log line.
	secrets := []string{admin, gateway, short}
	dumpHasNone(t, sqlDB, secrets)
	for name, log := range map[string]*loopback.Log{"A": &logA, "B": &logB} {
		for _, s := range secrets {
			if strings.Contains(log.String(), s) {
				t.Fatalf("process %s logged a key", name)
			}
		}
	}
}

// dumpHasNone reads every row of every table of the database and fails
// if any cell holds one of secrets.
func dumpHasNone(t *testing.T, sqlDB *sql.DB, secrets []string) {
	t.Helper()
	rows, err := sqlDB.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		rows.Scan(&name)
		tables = append(tables, name)
	}
	rows.Close()
	cells := 0
	for _, table := range tables {
		rows, err := sqlDB.Query("SELECT * FROM `" + table + "`")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				cells++
				for _, s := range secrets {
					if bytes.Contains(v, []byte(s)) {
						t.Fatalf("%s.%s holds a key", table, cols[i])
					}
				}
			}
		}
		rows.Close()
	}
	if cells == 0 {
		t.Fatal("the dump read nothing")
	}
	t.Logf("%d tables, %d cells: no key", len(tables), cells)
}

// TestKeysWhileMySQLIsDown: a process that read the keys goes on
// accepting them while MySQL is down; one that starts while it is down
// answers unavailable for keys only MySQL knows (a token of
// UNKEY_AUTH_TOKENS still works) until MySQL is back.
func TestKeysWhileMySQLIsDown(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	env := []string{"UNKEY_MYSQL_DSN=" + m.DSN, "UNKEY_OVERRIDES_POLL_INTERVAL=" + keysPoll.String()}
	_, key, _ := cliKey(t, env, "create", "--workspace", "ws_k", "--name", "gw", "--permissions", "ratelimit.*.limit")
	a := startServer(t, env...)
	limit := func(ts *testServer, token string) int {
		status, _ := ts.call(t, "Limit", token, `{"namespace":"api","identifier":"u","limit":1000,"duration":60000}`)
		return status
	}
	if s := limit(a, key); s != 200 {
		t.Fatalf("before the outage: %d", s)
	}
	m.Kill()
	time.Sleep(5 * keysPoll) // several failed polls
	if s := limit(a, key); s != 200 {
		t.Fatalf("during the outage, a known key: %d, want 200", s)
	}
	c := startServer(t, append(env, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")...)
	status, out := c.call(t, "Limit", key, `{"namespace":"api","identifier":"u","limit":1000,"duration":60000}`)
	if status != 503 || out["code"] != "unavailable" || !strings.Contains(out["message"].(string), "not loaded") {
		t.Fatalf("a process started during the outage, a key only MySQL knows: %d %v", status, out)
	}
	if s := limit(c, tokA); s != 200 {
		t.Fatalf("a process started during the outage, a token of UNKEY_AUTH_TOKENS: %d", s)
	}
	m.Start()
	poll.Until(t, 30*time.Second, "the process to load the keys once MySQL is back", func() bool { return limit(c, key) == 200 })
}

// TestKeysFileRotation: without MySQL, UNKEY_AUTH_KEYS_FILE's keys (from
// api keys generate) are in force, and a new file replaces them without a
// restart.
func TestKeysFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	writeKeys := func(entries ...string) {
		t.Helper()
		tmp := filepath.Join(dir, "next")
		os.WriteFile(tmp, []byte(`{"keys":[`+strings.Join(entries, ",")+`]}`), 0o600)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	_, first, out1 := cliKey(t, nil, "generate", "--workspace", "ws_f", "--name", "one", "--permissions", "ratelimit.*.limit")
	_, second, out2 := cliKey(t, nil, "generate", "--workspace", "ws_f", "--name", "two", "--permissions", "ratelimit.*.limit")
	entry := func(out string) string { return strings.SplitN(out, "\n", 2)[0] }
	if strings.Contains(entry(out1), first) {
		t.Fatal("the file entry holds the key")
	}
	writeKeys(entry(out1))
	ts := startServer(t, "UNKEY_AUTH_KEYS_FILE="+path)
	limit := func(token string) int {
		status, _ := ts.call(t, "Limit", token, `{"namespace":"api","identifier":"u","limit":1000,"duration":60000}`)
		return status
	}
	if limit(first) != 200 || limit(second) != 401 {
		t.Fatal("the file's first key is not the only one in force")
	}
	writeKeys(entry(out2))
	poll.Until(t, 10*time.Second, "the rotated file to be in force", func() bool { return limit(second) == 200 })
	if limit(first) != 401 {
		t.Fatal("the key removed from the file still works")
	}
	// Without MySQL, KeyService says where keys are managed.
	status, out, _ := ts.rpc(t, "KeyService", "ListKeys", second, `{}`)
	if status != 501 || !strings.Contains(out["message"].(string), "UNKEY_MYSQL_DSN") {
		t.Fatalf("KeyService without MySQL: %d %v", status, out)
	}
}
