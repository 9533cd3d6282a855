package daemon_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // dashboardZone wherever the test runs

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// The browser's time zone and locale in the dashboard's tests: five and a
// half hours off UTC, so that a time shown in UTC (or any whole-hour zone)
// fails, in a locale of 24-hour times.
const (
	dashboardZone   = "Asia/Kolkata"
	dashboardLocale = "en-GB"
)

// dashboardVisit is one visit of testdata/dashboard.mjs: the key typed into
// the page ("" for none) and where to save a screenshot ("" for none).
type dashboardVisit struct {
	Key  string `json:"key"`
	Shot string `json:"shot"`
}

// focusView is what the chart shows of the bucket pointed at: its start
// (-1: none), the tooltip's lines and the readout under the chart.
type focusView struct {
	Time    int64    `json:"time"`
	Tooltip []string `json:"tooltip"`
	Readout string   `json:"readout"`
}

// chartView is what testdata/dashboard.mjs reads off the chart.
type chartView struct {
	Title   string   `json:"title"`
	YTitle  string   `json:"yTitle"`
	YLabels []string `json:"yLabels"`
	XTitle  string   `json:"xTitle"`
	XTicks  []struct {
		Time int64  `json:"time"`
		Text string `json:"text"`
	} `json:"xTicks"`
	Bars []int64 `json:"bars"`
}

// dashboardView is what testdata/dashboard.mjs reads off the page.
type dashboardView struct {
	Error      string     `json:"error"`
	Notices    []string   `json:"notices"`
	Namespaces [][]string `json:"namespaces"`
	Namespace  string     `json:"namespace"`
	Passed     string     `json:"passed"`
	Denied     string     `json:"denied"`
	Chart      chartView  `json:"chart"`
	Top        [][]string `json:"top"`
	Overrides  [][]string `json:"overrides"`
	Penalties  [][]string `json:"penalties"`
	Regions    [][]string `json:"regions"`
	// Processes are the rows of the processes' table, each its class
	// ("live" or "gone") and its cells.
	Processes [][]string  `json:"processes"`
	Redis     [][]string  `json:"redis"`
	Hovers    []focusView `json:"hovers"`
	Left      focusView   `json:"left"`
	Focused   focusView   `json:"focused"`
	ArrowLeft focusView   `json:"arrowLeft"`
	Errors    []string    `json:"errors"`
	// Refused holds the HTTP status of each call the API refused, after
	// the key was typed in.
	Refused []string `json:"refused"`
}

// openDashboard opens ts's dashboard in headless Chromium once per visit, in
// dashboardZone and dashboardLocale, and returns what each shows.
func openDashboard(t *testing.T, ts *testServer, visits ...dashboardVisit) []dashboardView {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatal("chromium is not installed (make test installs Debian's chromium)")
	}
	spec, _ := json.Marshal(map[string]any{"base": ts.url, "timezone": dashboardZone, "locale": dashboardLocale, "visits": visits})
	cmd := exec.Command("node", "testdata/dashboard.mjs", string(spec))
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node testdata/dashboard.mjs: %v\n%s", err, stderr)
	}
	var views []dashboardView
	if err := json.Unmarshal(out, &views); err != nil || len(views) != len(visits) {
		t.Fatalf("the page's views %q: %v", out, err)
	}
	return views
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

// point is one bucket of a GetRatelimits answer.
type point struct{ passed, denied int }

// series reads a GetRatelimits answer's buckets by their start.
func series(out map[string]any) map[int64]point {
	m := map[int64]point{}
	list, _ := out["series"].([]any)
	for _, p := range list {
		p := p.(map[string]any)
		var at int64
		var v point
		fmt.Sscan(fmt.Sprint(p["time"]), &at)
		fmt.Sscan(fmt.Sprint(p["passed"]), &v.passed)
		fmt.Sscan(fmt.Sprint(p["denied"]), &v.denied)
		m[at] = v
	}
	return m
}

// checkChart checks the chart of an hour by minute against the API's
// series: a value axis of counts from 0 past the busiest minute, a time
// axis of local times on whole local minutes at even spacing, a bar for
// each minute with decisions, and the API's values in the tooltip and the
// readout when a bar is pointed at or the chart is reached from the
// keyboard.
func checkChart(t *testing.T, v dashboardView, api map[int64]point) {
	t.Helper()
	c := v.Chart
	zone, err := time.LoadLocation(dashboardZone)
	if err != nil {
		t.Fatal(err)
	}
	local := func(ms int64) time.Time { return time.UnixMilli(ms).In(zone) }

	peak := 0
	for _, p := range api {
		peak = max(peak, p.passed+p.denied)
	}
	if c.YTitle != "decisions per minute" || len(c.YLabels) < 2 || c.YLabels[0] != "0" {
		t.Fatalf("value axis %q %v, want decisions per minute from 0", c.YTitle, c.YLabels)
	}
	var step, last int
	for i, l := range c.YLabels {
		n, err := strconv.Atoi(strings.ReplaceAll(l, ",", ""))
		if err != nil || (i > 0 && n-last <= 0) || (i > 1 && n-last != step) {
			t.Fatalf("value axis labels %v: not counts at an even step", c.YLabels)
		}
		step, last = n-last, n
	}
	if last < peak {
		t.Errorf("value axis up to %d, but the busiest minute has %d", last, peak)
	}

	if c.XTitle != "local time (UTC+05:30)" || len(c.XTicks) < 3 {
		t.Fatalf("time axis %q with %d ticks, want local time (UTC+05:30) with several", c.XTitle, len(c.XTicks))
	}
	spacing := c.XTicks[1].Time - c.XTicks[0].Time
	for i, tick := range c.XTicks {
		at := local(tick.Time)
		if tick.Text != at.Format("15:04") {
			t.Errorf("tick at %v is labelled %q, want %q (%s)", tick.Time, tick.Text, at.Format("15:04"), dashboardZone)
		}
		if i > 0 && tick.Time-c.XTicks[i-1].Time != spacing {
			t.Errorf("ticks %v: not evenly spaced", c.XTicks)
		}
		if spacing%60_000 != 0 || at.Minute()%int(spacing/60_000) != 0 || at.Second() != 0 {
			t.Errorf("tick %q: not on a whole local multiple of its spacing (%d ms)", tick.Text, spacing)
		}
	}
	if span := c.XTicks[len(c.XTicks)-1].Time - c.XTicks[0].Time; span >= time.Hour.Milliseconds() || span < 30*time.Minute.Milliseconds() {
		t.Errorf("ticks span %d ms, want most of the hour shown", span)
	}

	var bars []int64
	for at := range api {
		bars = append(bars, at)
	}
	slices.Sort(bars)
	if !slices.Equal(c.Bars, bars) {
		t.Errorf("bars at %v, the API's minutes with decisions %v", c.Bars, bars)
	}
	// What the page says of the bucket starting at at.
	want := func(what string, f focusView, at int64) {
		t.Helper()
		p := api[at]
		lines := []string{fmt.Sprintf("passed %s", thousands(p.passed)), fmt.Sprintf("denied %s", thousands(p.denied)),
			fmt.Sprintf("total %s", thousands(p.passed+p.denied))}
		when := local(at).Format("15:04") + "–" + local(at+60_000).Format("15:04")
		if f.Time != at || len(f.Tooltip) != 4 || !strings.HasSuffix(f.Tooltip[0], ", "+when) || !slices.Equal(f.Tooltip[1:], lines) ||
			f.Readout != f.Tooltip[0]+": "+strings.Join(lines, ", ") {
			t.Errorf("%s: the chart shows %+v, want the minute %s with %v", what, f, when, lines)
		}
	}
	if len(v.Hovers) != min(5, len(bars)) {
		t.Fatalf("pointed at %d bars, want %d", len(v.Hovers), min(5, len(bars)))
	}
	for i, h := range v.Hovers {
		want(fmt.Sprintf("pointing at bar %d", i), h, bars[len(bars)-len(v.Hovers)+i])
	}
	if v.Left.Time != -1 || len(v.Left.Tooltip) != 0 || !strings.Contains(v.Left.Readout, "Point at the chart") {
		t.Errorf("after the pointer left the chart: %+v, want no tooltip and the hint", v.Left)
	}
	want("focused from the keyboard", v.Focused, bars[len(bars)-1])
	want("← from there", v.ArrowLeft, bars[len(bars)-1]-60_000)
}

// TestDashboardInChromium runs a process with MySQL, Redis and keys, sends
// decisions to two namespaces and sets an override, adds two processes of
// an earlier run that stopped reporting, then opens /dashboard in a real
// headless Chromium (in a time zone half an hour off whole hours) with
// each key typed in. With a key that may read everything the page shows
// the namespaces, totals, most limited identifiers and overrides the API
// answers; a chart with axes of counts and local times whose tooltip and
// readout give each minute's counts; the live processes counted per region
// and the ones gone greyed with when they were last seen, not counted; the
// Redis node as the live process sees it; and no script error. Keys of
// another workspace, without read_analytics, with it for one namespace,
// refused, and none at all each get the page's reason for what it does not
// show. Set DASHBOARD_SCREENSHOT=file to save a screenshot after an hour
// of made-up history is added (docs/dashboard.md's).
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	_, limiter, limiterEntry := cliKey(t, nil, "generate", "--workspace", "ws_a", "--name", "limiter", "--permissions", "ratelimit.*.limit")
	_, partial, partialEntry := cliKey(t, nil, "generate", "--workspace", "ws_a", "--name", "partial", "--permissions",
		"ratelimit.api.requests.read_analytics")
	entry := func(out string) string { return strings.SplitN(out, "\n", 2)[0] }
	if err := os.WriteFile(keysFile, []byte(`{"keys":[`+entry(limiterEntry)+`,`+entry(partialEntry)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "UNKEY_REGION=eu-west", "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_REDIS_URL="+testserver.StartRedis(t).URL(),
		"UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b", "UNKEY_AUTH_KEYS_FILE="+keysFile,
		"UNKEY_ANALYTICS_FLUSH_INTERVAL=200ms", "UNKEY_GLOBAL_SYNC_INTERVAL=200ms")
	limit := func(ns, id string, n int) {
		for range n {
			ts.call(t, "Limit", tokA, fmt.Sprintf(`{"namespace":%q,"identifier":%q,"limit":5,"duration":60000}`, ns, id))
		}
	}
	limit("sms.send", "spammer", 30)
	limit("sms.send", "alice", 4)
	limit("sms.send", "bob", 7)
	limit("api.requests", "carol", 3)
	// A shadow limit of 1 on a rollout: one admission, two shadow denials.
	for range 3 {
		ts.call(t, "Limit", tokA, `{"namespace":"sms.send","identifier":"rollout","limit":1,"duration":60000,"shadow":true}`)
	}
	if status, out := ts.call(t, "SetOverride", tokA,
		`{"namespace":"sms.send","identifier":"vip_*","limit":1000,"duration":60000,"burst":5000}`); status != 200 {
		t.Fatalf("SetOverride: %d %v", status, out)
	}
	// A penalty of 10 minutes: the second call offends, the third is
	// held (a denial too).
	for range 3 {
		ts.call(t, "Limit", tokA, `{"namespace":"sms.send","identifier":"mallory","limit":1,"duration":60000,"penalty":600000}`)
	}
	// The API's own answer, once both namespaces are flushed: the series,
	// and the identifiers (written after the series, so read until every
	// decision of the three is counted there too).
	var api map[string]any
	poll.Until(t, 10*time.Second, "the analytics of both namespaces", func() bool {
		_, out := getRatelimits(t, ts, tokA, "api.requests")
		_, api = getRatelimits(t, ts, tokA, "sms.send")
		p, d := totals(api)
		p2, _ := totals(out)
		named := 0
		top, _ := api["top"].([]any)
		for _, it := range top {
			var a, b int
			fmt.Sscan(fmt.Sprint(it.(map[string]any)["passed"]), &a)
			fmt.Sscan(fmt.Sprint(it.(map[string]any)["denied"]), &b)
			named += a + b
		}
		return p+d == 45 && p2 == 3 && named == 45
	})
	passed, denied := totals(api)

	// Two processes of an earlier run: one of this region silent for two
	// minutes with an open breaker, one of another region for 90 s.
	sqlDB := openDB(t, m.DSN)
	stoppedAt := time.Now().Add(-2 * time.Minute)
	if _, err := sqlDB.Exec(`INSERT INTO ratelimit_processes (process_id, region, seen_at, last_sync_at, redis_nodes, flush_interval_ms)
		VALUES ('stopped_eu', 'eu-west', FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 120000, FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 121000,
			'{"10.9.9.9:6379":"open"}', 10000),
		('stopped_us', 'us-east', FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) - 90000, 0, '{}', 10000)`); err != nil {
		t.Fatal(err)
	}

	views := openDashboard(t, ts, dashboardVisit{Key: tokA}, dashboardVisit{Key: tokB}, dashboardVisit{Key: limiter},
		dashboardVisit{Key: partial}, dashboardVisit{Key: "tok_wrong_0123456789abcdef"}, dashboardVisit{})
	view, other, noRead, oneRead, wrong, noKey := views[0], views[1], views[2], views[3], views[4], views[5]
	for i, v := range views {
		if v.Error != "" || len(v.Errors) > 0 {
			t.Errorf("visit %d: the page reports %q, script errors %v", i, v.Error, v.Errors)
		}
	}
	// The calls refused: ListNamespaces without read_analytics in any
	// namespace; GetStatus without status.read; ListOverrides without
	// read_override, and ListPenalties; both the page's first calls
	// without a key, or with one the API does not know.
	for i, want := range [][]string{nil, nil, {"403", "403"}, {"403", "403", "403"}, {"401", "401"}, {"401", "401"}} {
		if !slices.Equal(views[i].Refused, want) {
			t.Errorf("visit %d: the API refused calls with %v, want %v", i, views[i].Refused, want)
		}
	}
	if len(view.Notices) != 0 {
		t.Errorf("with every namespace readable and decisions, the page notes %q", view.Notices)
	}
	wantNamespaces := [][]string{{"sms.send", thousands(passed), thousands(denied)}, {"api.requests", "3", "0"}}
	if !slices.EqualFunc(view.Namespaces, wantNamespaces, slices.Equal) {
		t.Errorf("namespaces shown %v, want %v", view.Namespaces, wantNamespaces)
	}
	if view.Namespace != "sms.send" || view.Passed != thousands(passed) || view.Denied != thousands(denied) {
		t.Errorf("namespace %q shows %s passed, %s denied; the API says %d and %d", view.Namespace,
			view.Passed, view.Denied, passed, denied)
	}
	checkChart(t, view, series(api))
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
	// The rollout's shadow denials, per identifier, apart from denials.
	if i := slices.IndexFunc(view.Top, func(row []string) bool { return row[0] == "rollout" }); i < 0 ||
		!slices.Equal(view.Top[i], []string{"rollout", "1", "0", "2"}) {
		t.Errorf("identifiers shown %v, want rollout with 1 passed, 0 denied, 2 shadow-denied", view.Top)
	}
	if len(view.Overrides) != 1 || view.Overrides[0][0] != "vip_*" || view.Overrides[0][1] != "1,000" ||
		len(view.Overrides[0]) != 5 || view.Overrides[0][3] != "5,000" || view.Overrides[0][4] != "enforced" {
		t.Errorf("overrides shown %v, want vip_* at 1,000 with a bucket's burst of 5,000, enforced", view.Overrides)
	}
	if len(view.Penalties) != 1 || view.Penalties[0][0] != "mallory" || view.Penalties[0][2] != "10 min" ||
		!slices.Contains([]string{"9 min", "10 min"}, view.Penalties[0][1]) {
		t.Errorf("penalties shown %v, want mallory's 10 min block", view.Penalties)
	}

	// The fleet: the live process counted, the stopped ones listed gone.
	if len(view.Regions) != 2 || !slices.Equal(view.Regions[0][:2], []string{"eu-west", "1"}) || !strings.HasSuffix(view.Regions[0][2], "ago") ||
		!slices.Equal(view.Regions[1], []string{"us-east", "0", "–"}) {
		t.Errorf("regions shown %v, want eu-west with one live process and its last sync, us-east with none", view.Regions)
	}
	zone, _ := time.LoadLocation(dashboardZone)
	lastSeen := func(at time.Time) []string { // as the page may write it, a few seconds either side
		var out []string
		for d := -15; d <= 15; d++ {
			out = append(out, "gone: last seen "+at.Add(time.Duration(d)*time.Second).In(zone).Format("15:04:05"))
		}
		return out
	}
	gone := func(row []string, id, region string, at time.Time, ago *regexp.Regexp) bool {
		return len(row) == 4 && row[0] == "gone" && row[1] == id && row[2] == region &&
			slices.ContainsFunc(lastSeen(at), func(s string) bool { return strings.HasPrefix(row[3], s) }) &&
			ago.MatchString(row[3])
	}
	if len(view.Processes) != 3 || view.Processes[0][0] != "live" || view.Processes[0][2] != "eu-west" ||
		!strings.HasSuffix(view.Processes[0][3], " ago") || strings.Contains(view.Processes[0][3], "gone") ||
		// How long ago grows with the time Chromium takes to start: up to a
		// minute on a loaded machine.
		!gone(view.Processes[1], "stopped_us", "us-east", stoppedAt.Add(30*time.Second), regexp.MustCompile(`\(((9\d|1[01]\d)\.\d s|2 min) ago\)$`)) ||
		!gone(view.Processes[2], "stopped_eu", "eu-west", stoppedAt, regexp.MustCompile(`\([23] min ago\)$`)) {
		t.Errorf("processes shown %q, want the live one, then us-east's gone 90 s ago and eu-west's gone 2 min ago, with when", view.Processes)
	}
	if len(view.Redis) != 1 || view.Redis[0][1] != "closed" || view.Redis[0][2] != "1" {
		t.Errorf("Redis nodes shown %v, want one, closed, seen by the live process only", view.Redis)
	}

	// Each empty view says why.
	notes := func(v dashboardView) string { return strings.Join(v.Notices, " | ") }
	if len(other.Namespaces) != 0 || len(other.Notices) != 1 ||
		!strings.HasPrefix(other.Notices[0], "No decisions recorded in the last hour yet.") ||
		!strings.Contains(other.Notices[0], "(UNKEY_ANALYTICS_FLUSH_INTERVAL, every 200 ms here)") ||
		!strings.Contains(other.Notices[0], "appear here after the first flush") {
		t.Errorf("a workspace with no decisions: %v, notes %q; want none and when they appear", other.Namespaces, notes(other))
	}
	if len(noRead.Namespaces) != 0 || len(noRead.Notices) != 1 ||
		!strings.HasPrefix(noRead.Notices[0], "Your key may not read the analytics of any namespace.") ||
		!strings.Contains(noRead.Notices[0], "needs the permission ratelimit.<namespace>.read_analytics (ratelimit.*.read_analytics for every namespace)") {
		t.Errorf("a key without read_analytics: %v, notes %q; want none and the permission they need", noRead.Namespaces, notes(noRead))
	}
	if !slices.EqualFunc(oneRead.Namespaces, [][]string{{"api.requests", "3", "0"}}, slices.Equal) || len(oneRead.Notices) != 1 ||
		!strings.HasPrefix(oneRead.Notices[0], "1 more namespace has decisions in the last hour that your key may not read") ||
		!strings.Contains(oneRead.Notices[0], "ratelimit.<namespace>.read_analytics") {
		t.Errorf("a key that may read api.requests only: %v, notes %q; want it and a note of the one withheld", oneRead.Namespaces, notes(oneRead))
	}
	if len(noRead.Processes) != 1 || !strings.Contains(fmt.Sprint(noRead.Processes[0]), "Not shown: the fleet's status needs status.read") {
		t.Errorf("the fleet shown to a key without status.read: %v, want why not", noRead.Processes)
	}
	if len(oneRead.Overrides) != 1 || oneRead.Overrides[0][0] !=
		"Not shown: listing a namespace's overrides needs ratelimit.api.requests.read_override, which this key lacks." {
		t.Errorf("overrides shown to a key without read_override: %v, want why not", oneRead.Overrides)
	}
	if len(oneRead.Penalties) != 1 || oneRead.Penalties[0][0] !=
		"Not shown: listing a namespace's penalties needs ratelimit.api.requests.read_override, which this key lacks." {
		t.Errorf("penalties shown to a key without read_override: %v, want why not", oneRead.Penalties)
	}

	if len(wrong.Namespaces) != 0 || len(wrong.Processes) != 0 || len(wrong.Notices) != 1 ||
		!strings.HasPrefix(wrong.Notices[0], "The API refused this key (") ||
		!strings.HasSuffix(wrong.Notices[0], "Check the key in the API key box above and press Load.") {
		t.Errorf("a key the API refuses: %v, notes %q; want nothing shown and the refusal", wrong.Namespaces, notes(wrong))
	}
	if len(noKey.Namespaces) != 0 || len(noKey.Processes) != 0 || !slices.Equal(noKey.Notices,
		[]string{"This API needs a key to show its analytics. Type your API key into the API key box above and press Load."}) {
		t.Errorf("without a key the page shows %v and notes %q; want nothing and to type the key in", noKey.Namespaces, notes(noKey))
	}
	for _, v := range views {
		if s := notes(v) + v.Error; strings.Contains(s, "Authorization") || strings.Contains(s, "Bearer") {
			t.Errorf("the page tells a browser's user about headers: %q", s)
		}
	}

	if shot := os.Getenv("DASHBOARD_SCREENSHOT"); shot != "" {
		minute := time.Now().Truncate(time.Minute).UnixMilli()
		for i := int64(1); i <= 60; i++ {
			p, d := 300+(i*37)%200, (i*i*13)%90
			if _, err := sqlDB.Exec(`INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied)
				VALUES ('ws_a', 'sms.send', 1, ?, ?, ?)`, minute-i*60_000, p, d); err != nil {
				t.Fatal(err)
			}
		}
		openDashboard(t, ts, dashboardVisit{Key: tokA, Shot: shot})
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

// TestDashboardWithoutMySQL opens the dashboard of an open process without
// MySQL: the page says that what it shows is that process's own, kept in
// its memory, and, before any decision, that there are none yet and when
// they appear; once it decided, its decisions, with the note kept.
func TestDashboardWithoutMySQL(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "UNKEY_ANALYTICS_FLUSH_INTERVAL=200ms")
	poll.Until(t, 10*time.Second, "the process's first roll call", func() bool {
		_, out, _ := ts.rpc(t, "AnalyticsService", "GetStatus", "", `{}`)
		procs, _ := out["processes"].([]any)
		return len(procs) == 1
	})
	memory := "This API runs without MySQL (UNKEY_MYSQL_DSN is not set): each process counts only its own decisions, " +
		"in its memory, for 25 hours, and forgets them when it stops. This page shows the process that answered it, not the whole fleet."
	empty := openDashboard(t, ts, dashboardVisit{})[0]
	if empty.Error != "" || len(empty.Errors) > 0 {
		t.Fatalf("the page reports %q, script errors %v", empty.Error, empty.Errors)
	}
	if len(empty.Notices) != 2 || empty.Notices[0] != memory || !strings.HasPrefix(empty.Notices[1], "No decisions recorded in the last hour yet.") ||
		!strings.Contains(empty.Notices[1], "every 200 ms here") {
		t.Errorf("an empty process without MySQL notes %q, want that its analytics are its own and none yet", empty.Notices)
	}
	if !slices.EqualFunc(empty.Regions, [][]string{{"test", "1", "none (no MySQL)"}}, slices.Equal) || len(empty.Processes) != 1 ||
		empty.Processes[0][0] != "live" {
		t.Errorf("fleet shown %v %v, want this process, live, with no sync for want of MySQL", empty.Regions, empty.Processes)
	}
	for range 3 {
		ts.call(t, "Limit", "", `{"namespace":"api","identifier":"u","limit":2,"duration":60000}`)
	}
	poll.Until(t, 10*time.Second, "the decisions in the analytics", func() bool {
		_, out := getRatelimits(t, ts, "", "api")
		p, d := totals(out)
		return p == 2 && d == 1
	})
	v := openDashboard(t, ts, dashboardVisit{})[0]
	if !slices.EqualFunc(v.Namespaces, [][]string{{"api", "2", "1"}}, slices.Equal) || !slices.Equal(v.Notices, []string{memory}) {
		t.Errorf("a process without MySQL that decided shows %v and notes %q; want its decisions, noted as its own", v.Namespaces, v.Notices)
	}
}
