package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// notRun are the shell blocks of README.md and its pages this test cannot run, by the
// start of their first line, and why. Every other shell block runs (or, if
// all its commands are helm command lines, is rendered through
// chartcheck): a block added to a page runs unless it is listed here.
var notRun = []struct{ prefix, why string }{
	{"make run", "started by the test instead, as the process make run starts: ./bin/api with UNKEY_REGION=local, " +
		"in memory and open, on a free port in place of 7070"},
	{"UNKEY_REGION=eu-west UNKEY_RLS_CONFIG=YOUR_RULES_DIR ", "a deployment's command line, its placeholders marked: a Redis and rule files that are yours"},
	{"make deps", "the worker and restate-server on their own, the alternative to make dev, which holds their ports; " +
		"make deps installs packages; a MySQL on 3306 of yours"},
	{"worker keygen /etc/restate/", "writes under /etc and starts restate-server and a worker beside make dev's"},
	{"curl -s localhost:8080/BlocklistDrain/", "retires a legacy table: its shown Status is of a database with rows left in " +
		"it, which make dev's fresh one has not, and Approve drops a table of the schema"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT=", "needs an OpenTelemetry collector at otel-collector:4318"},
	{"make image", "make image (TestImage builds and runs the images), crane push (a registry) and migrate (a MySQL of " +
		"yours); its helm install is rendered through chartcheck with README's other helm lines"},
}

// windowBound are the sections whose shown answers hold only if their calls
// fall in one window of each duration they use, and why: before the first
// of their blocks that calls with a duration, the test waits until every
// such window has at least half its length, and at most 30 s, left.
var windowBound = map[string]string{
	"Quick start": "three Limit calls and a MultiLimit on one key count in one window",
	"The whole stack on one machine: `make dev`": "the tour's counts across regions add up in one window",
	"Token budgets":      "a reservation is settled in the window it was counted in",
	"Decision semantics": "the fixed window's three calls count in one window",
}

// readDocs returns the fenced blocks of README.md and of the pages of
// docs/ its table "Where to go next" links, in that order (a new user's),
// and their prose. A page added to the table is run; a page of shell
// blocks left out of it fails the test.
func readDocs(t *testing.T, root string) ([]mdBlock, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, prose := parseBlocks("README.md", string(raw))
	_, section, ok := strings.Cut(string(raw), "\n## Where to go next\n")
	if !ok {
		t.Fatal(`README.md has no section "Where to go next"`)
	}
	// The table's rows, each a page: "| [title](docs/page.md) | … |".
	row := regexp.MustCompile(`(?m)^\| \[[^\]]*\]\((docs/[a-z-]+\.md)\)`)
	pages := row.FindAllStringSubmatch(section, -1)
	if len(pages) < 10 {
		t.Fatalf("README.md's table links %d pages of docs/, expected more: is it still found?", len(pages))
	}
	seen := map[string]bool{}
	for _, m := range pages {
		if seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		raw, err := os.ReadFile(filepath.Join(root, m[1]))
		if err != nil {
			t.Fatal(err)
		}
		b, p := parseBlocks(m[1], string(raw))
		blocks, prose = append(blocks, b...), prose+"\n"+p
	}
	// A page of shell blocks left out of the table would not run (the
	// reports, ACCURACY.md and the others in capitals, hold the commands
	// of their measurements, not a task's).
	all, err := filepath.Glob(filepath.Join(root, "docs", "[a-z]*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range all {
		name := "docs/" + filepath.Base(f)
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := parseBlocks(name, string(raw)); !seen[name] && slices.ContainsFunc(b, func(b mdBlock) bool { return b.lang == "sh" }) {
			t.Errorf("%s has shell blocks but no row of README.md's table \"Where to go next\": add it there, where this test runs it", name)
		}
	}
	return blocks, prose
}

// TestReadme runs README.md's shell blocks as written, in order, as a new
// user would on a fresh clone, and compares what each command prints with
// the answer README shows under it ("# {…" lines; "…" stands for any
// text; a line of JSON is compared in its compact form) and, where a
// command's comment ends in "remaining N", with that count.
//
// The clone is a copy of this checkout's files (tracked, and untracked but
// not ignored) in a temporary directory, where the commands run: README's
// make build writes ./bin/api there. The quick start's calls go to a process
// started as make run starts one (see notRun); the rest go to the whole
// stack of make dev, which the test starts itself with scripts/dev.sh
// (DEV_DETACH=1, a DEV_DIR of its own and a DEV_PORT_BASE of free ports),
// so that it never meets a make dev of the user's. README's ports (7070 to
// 7073, 3307, 6380, 6381, 8080, 9070, 9080; 7080 and 7443 of the Envoy and
// TLS examples) are replaced by the ones the test chose, in each command's
// text: that is the only change made to the commands. A port README names
// that the test does not map fails it. So the Envoy try-it writes
// /tmp/rls/edge.yaml, as README does; what README starts in the background
// (./bin/api, twice) is stopped with the shell at the end. For the TLS
// example, which asks for a certificate of the user's, the test writes one
// (tls.crt, tls.key and ca.crt, from a CA of its own) into the clone first.
//
// Where README says sleep (for a flush and a sync, a poll of the keys
// table, an analytics flush), the test does not sleep: it runs the next
// command again until its answer is the one shown, for at most a minute,
// so that a slow machine waits longer and a fast one less. Each such
// command only reads, or (CreateKey before the first key is in force) is
// refused and changes nothing until what README waits for has happened.
// The sections of windowBound wait first for room in their windows (see
// there).
//
// Not run: the shell blocks of notRun, and the commands that are not in
// shell blocks: grpcurl (not installed here), docker compose (no Docker on
// the machines this project is developed on; the binaries' TestComposeFile
// check compose.yaml), the client examples (TestClientExamples), kubectl
// (no cluster). README's helm install and helm template lines, in blocks
// and in the text, are rendered through chartcheck as Helm would (pinned
// Helm's Go packages; helm install on a cluster of the chart's minimum
// version), and must succeed.
//
// Beside the commands it checks what README says of them: the first key
// closes the server (every process then refuses a call without a key), and
// the admin key sees the dashboard's data (ListNamespaces, GetRatelimits,
// ListOverrides, GetStatus).
func TestReadme(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts the whole stack and builds the programs")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks, prose := readDocs(t, root)
	start := time.Now()

	// make dev's stack, started at once: it builds and starts while the
	// clone builds and the quick start runs.
	base := freeBase(t)
	devDir := filepath.Join(t.TempDir(), "dev")
	devEnv := append(cleanEnv(), "DEV_DIR="+devDir, "DEV_PORT_BASE="+strconv.Itoa(base), "DEV_DETACH=1")
	up := exec.Command("bash", filepath.Join(root, "scripts", "dev.sh"))
	up.Env = devEnv
	var upOut strings.Builder
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	devUp := make(chan error, 1)
	go func() {
		err := up.Wait()
		if err == nil && !strings.Contains(upOut.String(), "ready — every process answers its health check") {
			err = fmt.Errorf("no ready line")
		}
		if err != nil {
			err = fmt.Errorf("dev.sh: %v\n%s", err, upOut.String())
		}
		devUp <- err
		close(devUp)
	}()
	t.Cleanup(func() {
		// A dev.sh still starting stops what it started on SIGTERM; then
		// dev.sh down stops what a detached one left.
		up.Process.Signal(syscall.SIGTERM)
		<-devUp
		down := exec.Command("bash", filepath.Join(root, "scripts", "dev.sh"), "down")
		down.Env = devEnv
		down.CombinedOutput()
	})

	clone := copyCheckout(t, root)
	quick := testserver.FreePort(t)
	quickPorts := map[int]int{7070: quick}
	devPorts := map[int]int{7070: base, 7071: base + 1, 7072: base + 2, 7073: base + 3,
		3307: base - 3763, 6380: base - 690, 6381: base - 689, 8080: base + 1010, 9070: base + 2000, 9080: base + 2010,
		7080: testserver.FreePort(t), 7443: testserver.FreePort(t)}
	sh := startShell(t, clone, cleanEnv())
	var quickAPI *exec.Cmd
	stopQuick := func() {
		if quickAPI != nil {
			quickAPI.Process.Signal(syscall.SIGTERM)
			quickAPI.Wait()
			quickAPI = nil
		}
	}
	t.Cleanup(stopQuick)
	devReady := false
	waited := map[string]bool{}
	ran := 0

	for _, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		steps, err := parseSteps(b)
		if err != nil {
			t.Fatal(err)
		}
		if why := notRunReason(b); why != "" {
			if b.first() == "make run" || strings.HasPrefix(b.first(), "make run ") {
				quickAPI = startQuickAPI(t, clone, quick)
			}
			t.Logf("%s:%d not run (%s): %s", b.file, b.line, b.first(), why)
			continue
		}
		if helmOnly(steps) {
			continue // rendered with the other helm lines below
		}
		if strings.HasPrefix(b.first(), "UNKEY_TLS_CERT_FILE=tls.crt ") {
			writeTLSFiles(t, clone) // README: "with a certificate of yours"
		}
		ports := devPorts
		if b.section == "Quick start" {
			ports = quickPorts
		} else if !devReady {
			stopQuick() // README: stop make run first, both serve on 7070
			if err := <-devUp; err != nil {
				t.Fatal(err)
			}
			devReady = true
			t.Logf("make dev's stack ready on base port %d after %v", base, time.Since(start).Round(time.Second))
		}
		if why, ok := windowBound[b.section]; ok && !waited[b.section] && durationField.MatchString(b.text) {
			waited[b.section] = true
			awaitWindowRoom(t, sectionDurations(blocks, b.section), why)
		}
		retry := false
		for _, s := range steps {
			if sleepCommand.MatchString(s.command) {
				retry = true // poll the next command instead; see the doc comment
				continue
			}
			runStep(t, sh, s, mapPorts(t, s, ports), retry)
			retry = false
			ran++
		}
		switch b.section {
		case "Keys and permissions":
			if strings.Contains(b.text, "keys create") {
				checkClosed(t, devPorts)
			}
		case "Analytics and the dashboard":
			key, _ := sh.run(`printf %s "$ADMIN_KEY"`, time.Minute)
			checkDashboard(t, devPorts[7070], key)
		}
	}
	if ran < 50 {
		t.Errorf("ran %d commands of README.md and its pages, expected more: are their blocks still found?", ran)
	}
	checkHelmLines(t, clone, blocks, prose)
	t.Logf("README.md and its pages: %d commands run in %v", ran, time.Since(start).Round(time.Second))
}

// notRunReason is why a block is not run, or "".
func notRunReason(b mdBlock) string {
	for _, n := range notRun {
		if strings.HasPrefix(b.first(), n.prefix) {
			return n.why
		}
	}
	return ""
}

// helmLine matches a helm command line.
var helmLine = regexp.MustCompile(`^helm (install|template) `)

// helmOnly reports whether every command of a block is a helm command
// line.
func helmOnly(steps []step) bool {
	for _, s := range steps {
		if !helmLine.MatchString(s.command) {
			return false
		}
	}
	return len(steps) > 0
}

// sleepCommand is a command that only sleeps (with its comment).
var sleepCommand = regexp.MustCompile(`^sleep [0-9.]+(\s+#.*)?$`)

// cleanEnv is this process's environment without the settings README's
// commands set themselves (UNKEY_*, DEV_*, ADMIN_KEY), so that a
// developer's own do not change what they do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "UNKEY_") || strings.HasPrefix(kv, "DEV_") || strings.HasPrefix(kv, "ADMIN_KEY=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// copyCheckout copies the checkout's files (tracked, and untracked but not
// ignored: what a clone with this change would hold) into a temporary
// directory.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "ratelimit")
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the checkout, or not a file
		}
		dst := filepath.Join(clone, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, dst, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return clone
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// startQuickAPI starts the clone's ./bin/api as make run does (region
// local, in memory, open, text logs), on port, and waits until it is
// ready.
func startQuickAPI(t *testing.T, clone string, port int) *exec.Cmd {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "make-run.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(clone, "bin", "api"))
	cmd.Dir = clone
	cmd.Env = append(cleanEnv(), "UNKEY_REGION=local", "UNKEY_LOG_FORMAT=text", "UNKEY_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("README's make build should have written ./bin/api: %v", err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	if !poll.Within(time.Minute, func() bool { return get(url) == http.StatusOK }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("make run's process is not ready: %s", tailFile(log.Name()))
	}
	return cmd
}

// writeTLSFiles writes the files README's TLS example asks of the user
// into the clone: a server certificate for 127.0.0.1 (tls.crt), its key
// (tls.key) and the CA that signed it (ca.crt).
func writeTLSFiles(t *testing.T, clone string) {
	t.Helper()
	dir := t.TempDir()
	cert, key, ca := testserver.NewCA(t).ServerFiles(t, dir)
	for from, to := range map[string]string{cert: "tls.crt", key: "tls.key", ca: "ca.crt"} {
		if err := copyFile(from, filepath.Join(clone, to), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// hostPort is a loopback address in a command.
var hostPort = regexp.MustCompile(`\b(localhost|127\.0\.0\.1):([0-9]+)\b`)

// mapPorts is the step's command with README's ports replaced by the
// test's; a port with no replacement fails t.
func mapPorts(t *testing.T, s step, ports map[int]int) string {
	t.Helper()
	return hostPort.ReplaceAllStringFunc(s.command, func(addr string) string {
		m := hostPort.FindStringSubmatch(addr)
		p, _ := strconv.Atoi(m[2])
		to, ok := ports[p]
		if !ok {
			t.Fatalf("%s:%d: port %d is not one the test maps", s.file, s.line, p)
		}
		return m[1] + ":" + strconv.Itoa(to)
	})
}

// remainingComment is a comment that says what a call leaves.
var remainingComment = regexp.MustCompile(`remaining ([0-9]+)$`)

// runStep runs one command and checks it: its exit status is 0; its output
// is its shown answer; a comment ending in "remaining N" holds; make
// loadgen's calls did not fail. With retry, a command whose answer does not
// match yet is run again (every 200 ms, for at most a minute) in place of
// README's sleep before it.
func runStep(t *testing.T, sh *shell, s step, command string, retry bool) {
	t.Helper()
	check := func(out string) string {
		if s.answer != "" && !answerMatches(s.answer, out) {
			return fmt.Sprintf("answered\n  %s\n%s shows\n  %s", compactOutput(out), s.file, s.answer)
		}
		if m := remainingComment.FindStringSubmatch(s.comment); m != nil && !strings.Contains(out, `"remaining":"`+m[1]+`"`) {
			return fmt.Sprintf("answered %s; %s's comment says remaining %s", out, s.file, m[1])
		}
		if strings.HasPrefix(s.command, "make loadgen ") && !strings.Contains(out, ", failed 0 ") {
			return "calls failed:\n" + out
		}
		return ""
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out, rc := sh.run(command, 10*time.Minute)
		if rc != 0 {
			t.Fatalf("%s:%d: exit status %d:\n%s\noutput: %s\nstandard error: %s", s.file, s.line, rc, command, out, tailFile(sh.stderrLog()))
		}
		bad := check(out)
		if bad == "" {
			return
		}
		if !retry || time.Now().After(deadline) {
			t.Errorf("%s:%d:\n%s\n%s", s.file, s.line, command, bad)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// durationField is a window's duration in a call.
var durationField = regexp.MustCompile(`"duration":([0-9]+)`)

// sectionDurations are the durations (ms) the calls of a section's shell
// blocks use.
func sectionDurations(blocks []mdBlock, section string) []int64 {
	var ds []int64
	for _, b := range blocks {
		if b.section != section || b.lang != "sh" {
			continue
		}
		for _, m := range durationField.FindAllStringSubmatch(b.text, -1) {
			if d, _ := strconv.ParseInt(m[1], 10, 64); d >= 1000 && !slices.Contains(ds, d) {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// awaitWindowRoom waits until every window of the durations (ms) has at
// least half its length, and at most 30 s, left before it ends.
func awaitWindowRoom(t *testing.T, durations []int64, why string) {
	t.Helper()
	room := func() bool {
		now := time.Now().UnixMilli()
		for _, d := range durations {
			if left := d - now%d; left < min(d/2, 30_000) {
				return false
			}
		}
		return true
	}
	if !room() {
		t.Logf("waiting for room in the windows of %v ms: %s", durations, why)
	}
	poll.Until(t, 2*time.Minute, "room in the windows of "+fmt.Sprint(durations), room)
}

// checkClosed checks what README says the first key does: every process
// of both regions soon refuses a call without a key.
func checkClosed(t *testing.T, ports map[int]int) {
	t.Helper()
	for _, p := range []int{7070, 7071, 7072, 7073} {
		url := "http://127.0.0.1:" + strconv.Itoa(ports[p]) + "/ratelimit.v1.RatelimitService/Limit"
		poll.Until(t, 30*time.Second, fmt.Sprintf("the API README calls %d to refuse a call without a key", p), func() bool {
			resp, err := http.Post(url, "application/json", strings.NewReader(`{"namespace":"n","identifier":"i","limit":1,"duration":60000}`))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusUnauthorized
		})
	}
}

// checkDashboard checks that the admin key README makes reads what the
// dashboard shows: the namespaces README's examples used, their series, the
// overrides, the fleet; and that the page is served.
func checkDashboard(t *testing.T, port int, key string) {
	t.Helper()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	if code := get(url + "/dashboard"); code != http.StatusOK {
		t.Errorf("GET /dashboard: %d", code)
	}
	now := time.Now().UnixMilli()
	for _, c := range []struct{ method, body, want string }{
		{"ListNamespaces", fmt.Sprintf(`{"from":%d,"to":%d}`, now-3600_000, now), `"namespace":"llm.tokens"`},
		{"ListNamespaces", fmt.Sprintf(`{"from":%d,"to":%d}`, now-3600_000, now), `"namespace":"sms.v2"`},
		{"GetRatelimits", fmt.Sprintf(`{"namespace":"sms.v2","from":%d,"to":%d}`, now-3600_000, now), `"passed":"1"`},
		{"GetStatus", `{}`, `"processes":[{`},
	} {
		status, body := post(t, url+"/ratelimit.v1.AnalyticsService/"+c.method, key, c.body)
		if status != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("the dashboard's %s with README's admin key: %d %s, want %s", c.method, status, body, c.want)
		}
	}
	status, body := post(t, url+"/ratelimit.v1.RatelimitService/ListOverrides", key, `{"namespace":"sms.v2"}`)
	if status != http.StatusOK || !strings.Contains(body, `"identifier":"user_42"`) {
		t.Errorf("the dashboard's ListOverrides with README's admin key: %d %s", status, body)
	}
}

// post sends a Connect JSON call with a bearer key.
func post(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// inlineHelm is a helm command line in README's text, in backquotes (it may
// wrap across lines).
var inlineHelm = regexp.MustCompile("`(helm (?:install|template) [^`]+)`")

// checkHelmLines renders every helm install and helm template line of
// README (in shell blocks, and in the text) through chartcheck, in the
// clone, as Helm would: each must succeed.
func checkHelmLines(t *testing.T, clone string, blocks []mdBlock, prose string) {
	t.Helper()
	var lines []string
	for _, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		steps, _ := parseSteps(b)
		for _, s := range steps {
			if helmLine.MatchString(s.command) {
				lines = append(lines, s.command)
			}
		}
	}
	for _, m := range inlineHelm.FindAllStringSubmatch(prose, -1) {
		lines = append(lines, strings.Join(strings.Fields(m[1]), " "))
	}
	if len(lines) < 4 {
		t.Fatalf("README's helm lines: %q, expected at least the quick start's, the Kubernetes section's install and template, and its bare install", lines)
	}
	chartcheck := filepath.Join(t.TempDir(), "chartcheck")
	build := exec.Command("go", "build", "-o", chartcheck, "./chartcheck")
	build.Dir = filepath.Join(clone, "tools")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chartcheck: %v\n%s", err, out)
	}
	for _, line := range lines {
		words, err := shellWords(line)
		if err != nil {
			t.Errorf("README's %s: %v", line, err)
			continue
		}
		cmd := exec.Command(chartcheck, append([]string{"helm"}, words[1:]...)...)
		cmd.Dir = clone
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README's %s does not render as Helm would: %v\n%s", line, err, out)
		} else {
			t.Logf("rendered as Helm would: %s", line)
		}
	}
}
