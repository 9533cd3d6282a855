package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/dbtest"
	"github.com/unkeyed/ratelimit/internal/poll"
	"github.com/unkeyed/ratelimit/internal/testserver"
)

// dashboardView is what testdata/dashboard.mjs reads off the page.
type dashboardView struct {
	Error      string     `json:"error"`
	Namespaces [][]string `json:"namespaces"`
	Namespace  string     `json:"namespace"`
	Passed     string     `json:"passed"`
	Denied     string     `json:"denied"`
	Bars       int        `json:"bars"`
	Top        [][]string `json:"top"`
	Overrides  [][]string `json:"overrides"`
	Regions    [][]string `json:"regions"`
	Redis      [][]string `json:"redis"`
	Errors     []string   `json:"errors"`
}

// openDashboard opens ts's dashboard in headless Chromium with key and
// returns what it shows; with shot set, it saves a screenshot there too.
func openDashboard(t *testing.T, ts *testServer, key, shot string) dashboardView {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatal("chromium is not installed (make test installs Debian's chromium)")
	}
	cmd := exec.Command("node", "testdata/dashboard.mjs", ts.url, key, shot)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node testdata/dashboard.mjs: %v\n%s", err, stderr)
	}
	var v dashboardView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("the page's view %q: %v", out, err)
	}
	return v
}

// openDB opens a pool on dsn, closed when the test ends.
func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	sqlDB, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	return sqlDB
}

// thousands writes n as the page does (en-US grouping).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestDashboardInChromium runs a process with MySQL, Redis and keys, sends
// decisions to two namespaces and sets an override, then opens /dashboard
// in a real headless Chromium with the key typed in: the page shows the
// namespaces, totals, most limited identifiers and overrides the API
// answers, the region's last sync and the Redis node's breaker, with no
// script error. Set DASHBOARD_SCREENSHOT=file to save a screenshot after
// an hour of made-up history is added (the README's).
func TestDashboardInChromium(t *testing.T) {
	m, _ := dbtest.Start(t)
	ts := startServer(t, "UNKEY_REGION=eu-west", "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_REDIS_URL="+testserver.StartRedis(t).URL(),
		"UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_ANALYTICS_FLUSH_INTERVAL=200ms", "UNKEY_GLOBAL_SYNC_INTERVAL=200ms")
	limit := func(ns, id string, n int) {
		for range n {
			ts.call(t, "Limit", tokA, fmt.Sprintf(`{"namespace":%q,"identifier":%q,"limit":5,"duration":60000}`, ns, id))
		}
	}
	limit("sms.send", "spammer", 30)
	limit("sms.send", "alice", 4)
	limit("sms.send", "bob", 7)
	limit("api.requests", "carol", 3)
	if status, out := ts.call(t, "SetOverride", tokA,
		`{"namespace":"sms.send","identifier":"vip_*","limit":1000,"duration":60000}`); status != 200 {
		t.Fatalf("SetOverride: %d %v", status, out)
	}
	// The API's own answer, once both namespaces are flushed.
	var api map[string]any
	poll.Until(t, 10*time.Second, "the analytics of both namespaces", func() bool {
		_, out := getRatelimits(t, ts, tokA, "api.requests")
		_, api = getRatelimits(t, ts, tokA, "sms.send")
		p, d := totals(api)
		p2, _ := totals(out)
		return p+d == 41 && p2 == 3
	})
	passed, denied := totals(api)

	view := openDashboard(t, ts, tokA, "")
	if view.Error != "" || len(view.Errors) > 0 {
		t.Fatalf("the page reports %q, script errors %v", view.Error, view.Errors)
	}
	wantNamespaces := [][]string{{"sms.send", thousands(passed), thousands(denied)}, {"api.requests", "3", "0"}}
	if !slices.EqualFunc(view.Namespaces, wantNamespaces, slices.Equal) {
		t.Errorf("namespaces shown %v, want %v", view.Namespaces, wantNamespaces)
	}
	if view.Namespace != "sms.send" || view.Passed != thousands(passed) || view.Denied != thousands(denied) || view.Bars == 0 {
		t.Errorf("namespace %q shows %s passed, %s denied, %d bars; the API says %d and %d", view.Namespace,
			view.Passed, view.Denied, view.Bars, passed, denied)
	}
	top := api["top"].([]any)
	for i, it := range top {
		e := it.(map[string]any)
		if i >= len(view.Top) || view.Top[i][0] != e["identifier"] || view.Top[i][2] != fmt.Sprint(e["denied"]) {
			t.Errorf("top identifier %d: shown %v, the API says %v", i, view.Top, top)
			break
		}
	}
	if len(view.Top) == 0 || view.Top[0][0] != "spammer" {
		t.Errorf("the most limited identifier shown: %v, want spammer", view.Top)
	}
	if len(view.Overrides) != 1 || view.Overrides[0][0] != "vip_*" || view.Overrides[0][1] != "1,000" {
		t.Errorf("overrides shown %v, want vip_* at 1,000", view.Overrides)
	}
	if len(view.Regions) != 1 || view.Regions[0][0] != "eu-west" || !strings.HasSuffix(view.Regions[0][2], "ago") {
		t.Errorf("regions shown %v, want eu-west with its last sync", view.Regions)
	}
	if len(view.Redis) != 1 || view.Redis[0][1] != "closed" {
		t.Errorf("Redis nodes shown %v, want one, closed", view.Redis)
	}

	if shot := os.Getenv("DASHBOARD_SCREENSHOT"); shot != "" {
		sqlDB := openDB(t, m.DSN)
		minute := time.Now().Truncate(time.Minute).UnixMilli()
		for i := int64(1); i <= 60; i++ {
			p, d := 300+(i*37)%200, (i*i*13)%90
			if _, err := sqlDB.Exec(`INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied)
				VALUES ('ws_a', 'sms.send', 1, ?, ?, ?)`, minute-i*60_000, p, d); err != nil {
				t.Fatal(err)
			}
		}
		openDashboard(t, ts, tokA, shot)
	}
	// Without the key, the page says why it shows nothing.
	if v := openDashboard(t, ts, "", ""); !strings.Contains(v.Error, "Unauthenticated") && !strings.Contains(v.Error, "bearer") {
		t.Errorf("without a key the page says %q", v.Error)
	}
	// The page itself is static and served to anyone, with headers that
	// keep it to itself.
	resp, err := http.Get(ts.url + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("GET /dashboard/: %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
}
