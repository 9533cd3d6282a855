package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/dbtest"
	"github.com/unkeyed/ratelimit/internal/poll"
	"github.com/unkeyed/ratelimit/internal/testserver"
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
// processes with their last sync.
func TestAnalyticsAcrossRegions(t *testing.T) {
	m, _ := dbtest.Start(t)
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
	if status, out, _ := a.rpc(t, "AnalyticsService", "GetStatus", "", `{}`); status != 200 || len(out["processes"].([]any)) != 2 {
		t.Fatalf("GetStatus: %d %v", status, out)
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
	entry := func(out string) string { return strings.SplitN(out, "\n", 2)[0] }
	if err := os.WriteFile(path, []byte(`{"keys":[`+entry(out1)+`,`+entry(out2)+`]}`), 0o600); err != nil {
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
