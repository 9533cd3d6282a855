package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// getRatelimits asks ts for namespace's minutes around now.
func getRatelimits(t *testing.T, ts *testServer, token, namespace string) (int, map[string]any) {
	t.Helper()
	now := time.Now().UnixMilli()
	status, out, _ := ts.rpc(t, "AnalyticsService", "GetRatelimits", token,
		fmt.Sprintf(`{"namespace":%q,"from":%d,"to":%d,"granularity":"minute","top":20}`, namespace, now-3_600_000, now+60_000))
	return status, out
}

// totals adds up a GetRatelimits answer's series.
func totals(out map[string]any) (passed, denied int) {
	series, _ := out["series"].([]any)
	for _, p := range series {
		var a, b int
		fmt.Sscan(fmt.Sprint(p.(map[string]any)["passed"]), &a)
		fmt.Sscan(fmt.Sprint(p.(map[string]any)["denied"]), &b)
		passed += a
		denied += b
	}
	return passed, denied
}

// TestAnalyticsAcrossRegions runs two regions on one MariaDB, a process
// each; both decide for one namespace. Within a flush interval either
// process answers the namespace's totals of both regions, exactly, and
// names the identifier that was denied most; the roll call lists both
// processes live, with their flush interval, and a process that stopped
// reporting two minutes ago as gone.
func TestAnalyticsAcrossRegions(t *testing.T) {
	t.Parallel()
	m, sqlDB := dbtest.Start(t)
	start := func(region string) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_REDIS_URL="+testserver.StartRedis(t).URL(),
			"UNKEY_ANALYTICS_FLUSH_INTERVAL=200ms", "UNKEY_GLOBAL_SYNC_INTERVAL=200ms")
	}
	a, b := start("a"), start("b")
	body := func(id string) string {
		return fmt.Sprintf(`{"namespace":"sms","identifier":%q,"limit":3,"duration":2592000000}`, id)
	}
	wantPassed, wantDenied := 0, 0
	for i := range 40 {
		ts := []*testServer{a, b}[i%2]
		id := "spammer"
		if i%4 == 3 {
			id = fmt.Sprint("user_", i)
		}
		_, out := ts.call(t, "Limit", "", body(id))
		if out["success"] == true {
			wantPassed++
		} else {
			wantDenied++
		}
	}
	for _, ts := range []*testServer{a, b} {
		poll.Until(t, 10*time.Second, "the totals of both regions", func() bool {
			_, out := getRatelimits(t, ts, "", "sms")
			p, d := totals(out)
			return p == wantPassed && d == wantDenied
		})
	}
	_, out := getRatelimits(t, b, "", "sms")
	top, _ := out["top"].([]any)
	if len(top) == 0 || top[0].(map[string]any)["identifier"] != "spammer" {
		t.Fatalf("top: %v, want spammer first", top)
	}
	// A process of an earlier run, silent for two minutes, and one of an
	// earlier version (no flush interval said) silent for 20 s.
	if _, err := sqlDB.Exec(`INSERT INTO ratelimit_processes (process_id, region, seen_at, last_sync_at, redis_nodes, flush_interval_ms)
		VALUES ('stale', 'a', FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 120000, 0, '{}', 10000),
		('old', 'b', FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 20000, 0, '{}', 0)`); err != nil {
		t.Fatal(err)
	}
	status, out, _ := a.rpc(t, "AnalyticsService", "GetStatus", "", `{}`)
	procs, _ := out["processes"].([]any)
	if status != 200 || len(procs) != 4 || out["region"] != "a" || out["flushIntervalMs"] != "200" || out["analyticsInMemory"] != false {
		t.Fatalf("GetStatus: %d %v, want 4 processes, this one reporting every 200 ms, with MySQL", status, out)
	}
	live := map[string]bool{}
	for _, p := range procs {
		p := p.(map[string]any)
		id, every := p["id"].(string), p["flushIntervalMs"]
		live[id] = p["live"] == true
		var seen int64
		fmt.Sscan(fmt.Sprint(p["seenAgoMs"]), &seen)
		switch id {
		case "stale":
			if every != "10000" || live[id] || seen < 120_000 {
				t.Errorf("the process silent for two minutes: %v, want it gone, reporting every 10 s", p)
			}
		case "old":
			if every != "10000" || !live[id] {
				t.Errorf("an earlier version's process silent for 20 s: %v, want it live, 10 s assumed", p)
			}
		default:
			if every != "200" || !live[id] || seen > 5000 {
				t.Errorf("a running process: %v, want it live, reporting every 200 ms", p)
			}
		}
	}
	if len(live) != 4 {
		t.Errorf("processes %v, want 4 apart", live)
	}
}

// TestAnalyticsNeedsItsPermission: a key without read_analytics for the
// namespace is refused, naming the permission; bad ranges are refused
// naming the field.
func TestAnalyticsNeedsItsPermission(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	_, limiter, out1 := cliKey(t, nil, "generate", "--workspace", "ws_a", "--name", "limiter", "--permissions", "ratelimit.sms.limit")
	_, reader, out2 := cliKey(t, nil, "generate", "--workspace", "ws_a", "--name", "reader", "--permissions", "ratelimit.sms.read_analytics")
	_, operator, out3 := cliKey(t, nil, "generate", "--workspace", "ops", "--name", "operator", "--permissions", "status.read")
	_, other, out4 := cliKey(t, nil, "generate", "--workspace", "ws_a", "--name", "other", "--permissions", "ratelimit.other.read_analytics")
	entry := func(out string) string { return strings.SplitN(out, "\n", 2)[0] }
	if err := os.WriteFile(path, []byte(`{"keys":[`+entry(out1)+`,`+entry(out2)+`,`+entry(out3)+`,`+entry(out4)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "UNKEY_AUTH_KEYS_FILE="+path, "UNKEY_ANALYTICS_FLUSH_INTERVAL=100ms")
	ts.call(t, "Limit", limiter, `{"namespace":"sms","identifier":"u","limit":1,"duration":60000}`)
	ts.call(t, "Limit", limiter, `{"namespace":"sms","identifier":"u","limit":1,"duration":60000}`)
	if status, out := getRatelimits(t, ts, limiter, "sms"); status != 403 || !strings.Contains(fmt.Sprint(out["message"]), "ratelimit.sms.read_analytics") {
		t.Fatalf("without read_analytics: %d %v", status, out)
	}
	poll.Until(t, 10*time.Second, "the reader to see one passed and one denied", func() bool {
		status, out := getRatelimits(t, ts, reader, "sms")
		p, d := totals(out)
		return status == 200 && p == 1 && d == 1
	})
	// ListNamespaces leaves out what the key may not read, and says how
	// many it left out, never their names.
	now := time.Now().UnixMilli()
	span := fmt.Sprintf(`{"from":%d,"to":%d}`, now-3_600_000, now+60_000)
	if status, out, _ := ts.rpc(t, "AnalyticsService", "ListNamespaces", other, span); status != 200 ||
		len(out["namespaces"].([]any)) != 0 || out["withheld"] != float64(1) {
		t.Errorf("ListNamespaces with read_analytics of another namespace: %d %v, want none listed, one withheld", status, out)
	}
	// A key that may read no namespace's analytics is refused before any
	// query: before, it cost the database a scan of the workspace's rows.
	if status, out, _ := ts.rpc(t, "AnalyticsService", "ListNamespaces", limiter, span); status != 403 ||
		!strings.Contains(fmt.Sprint(out["message"]), "read_analytics") {
		t.Errorf("ListNamespaces without read_analytics: %d %v, want 403 naming it", status, out)
	}
	if status, out, _ := ts.rpc(t, "AnalyticsService", "ListNamespaces", reader, span); status != 200 ||
		len(out["namespaces"].([]any)) != 1 || out["withheld"] != float64(0) {
		t.Errorf("ListNamespaces with read_analytics: %d %v, want sms listed, none withheld", status, out)
	}
	// The fleet's status is the operator's: before, any key read every
	// process's id, region and Redis addresses.
	for _, key := range []string{limiter, reader} {
		if status, out, _ := ts.rpc(t, "AnalyticsService", "GetStatus", key, `{}`); status != 403 ||
			!strings.Contains(fmt.Sprint(out["message"]), "status.read") || out["processes"] != nil {
			t.Errorf("GetStatus with a tenant's key: %d %v, want 403 naming status.read", status, out)
		}
	}
	// Without MySQL, the status says the analytics are this process's own.
	if status, out, _ := ts.rpc(t, "AnalyticsService", "GetStatus", operator, `{}`); status != 200 ||
		out["analyticsInMemory"] != true || out["flushIntervalMs"] != "100" {
		t.Errorf("GetStatus without MySQL: %d %v, want the analytics in memory, flushed every 100 ms", status, out)
	}
	for body, field := range map[string]string{
		`{"namespace":"sms","from":10,"to":5}`:                              "to:",
		`{"namespace":"sms","from":0,"to":86460000,"granularity":"minute"}`: "to:",
		`{"namespace":"sms","from":0,"to":1000,"granularity":"week"}`:       "granularity:",
		`{"namespace":"","from":0,"to":1000}`:                               "namespace:",
		`{"namespace":"sms","from":0,"to":1000,"top":101}`:                  "top:",
		`{"namespace":"sms","from":-1,"to":1000}`:                           "from:",
	} {
		if status, out, _ := ts.rpc(t, "AnalyticsService", "GetRatelimits", reader, body); status != 400 ||
			!strings.HasPrefix(fmt.Sprint(out["message"]), field) {
			t.Errorf("%s: %d %v, want a 400 naming %s", body, status, out, field)
		}
	}
}
