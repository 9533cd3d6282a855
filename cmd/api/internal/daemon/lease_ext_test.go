package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// acquireJSON asks for cost slots of a limit of limit on id, leases of
// lease seconds.
func acquireJSON(id string, limit, lease, cost int) string {
	return fmt.Sprintf(`{"namespace":"gpu","identifier":%q,"limit":%d,"lease":%d,"cost":%d}`, id, limit, lease, cost)
}

// acquireOn acquires on ts and returns the answer.
func acquireOn(t *testing.T, ts *testServer, token, body string) map[string]any {
	t.Helper()
	code, out := ts.call(t, "Acquire", token, body)
	if code != 200 {
		t.Fatalf("acquire %s: %d %v", body, code, out)
	}
	return out
}

// leaseOf returns the lease id of an admitted acquisition.
func leaseOf(t *testing.T, out map[string]any) string {
	t.Helper()
	id, _ := out["leaseId"].(string)
	if out["success"] != true || id == "" {
		t.Fatalf("acquisition refused: %v", out)
	}
	return id
}

func releaseOn(t *testing.T, ts *testServer, token, lease string) (int, map[string]any) {
	t.Helper()
	return ts.call(t, "Release", token, fmt.Sprintf(`{"leaseId":%q}`, lease))
}

// inFlightOn reads what ts knows is held, by releasing a lease released
// before (which frees nothing and answers the count).
func inFlightOn(t *testing.T, ts *testServer, used string) string {
	t.Helper()
	code, out := releaseOn(t, ts, "", used)
	if code != 200 || out["released"] == true {
		t.Fatalf("release of a used lease: %d %v", code, out)
	}
	n, _ := out["inFlight"].(string)
	return n
}

// TestLeasesAcrossProcessesAndRegions runs two regions on one MariaDB,
// region a with two processes on its Redis: slots taken in one process
// count in every other, a release or an extension in any of them frees
// them once, and a forged lease frees nothing.
func TestLeasesAcrossProcessesAndRegions(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	ra, rb := testserver.StartRedis(t), testserver.StartRedis(t)
	start := func(region string, r *testserver.Redis) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN,
			"UNKEY_GLOBAL_FLUSH_INTERVAL=200ms", "UNKEY_GLOBAL_SYNC_INTERVAL=200ms")
	}
	a1, a2, b1 := start("a", ra), start("a", ra), start("b", rb)
	const id = "team_7"
	probe := leaseOf(t, acquireOn(t, a1, "", acquireJSON(id, 3, 60, 1)))
	if code, out := releaseOn(t, a1, "", probe); code != 200 || out["released"] != true || out["inFlight"] != "0" {
		t.Fatalf("first release: %d %v", code, out)
	}

	two := acquireOn(t, a1, "", acquireJSON(id, 3, 60, 2))
	held := leaseOf(t, two)
	if two["inFlight"] != "2" || two["limit"] != "3" {
		t.Fatalf("two slots of 3: %v", two)
	}
	if exp, _ := two["expiresAt"].(string); exp == "" {
		t.Fatalf("no expiresAt: %v", two)
	}
	poll.Until(t, 10*time.Second, "region b to see 2 in flight", func() bool { return inFlightOn(t, b1, probe) == "2" })
	last := leaseOf(t, acquireOn(t, b1, "", acquireJSON(id, 3, 60, 1)))
	poll.Until(t, 10*time.Second, "a2 to see 3 in flight", func() bool { return inFlightOn(t, a2, probe) == "3" })
	refused := acquireOn(t, a2, "", acquireJSON(id, 3, 60, 1))
	if refused["success"] != false || refused["leaseId"] != "" || refused["retryAfter"] == "0" {
		t.Fatalf("a fourth slot of 3: %v", refused)
	}

	// Released in another region than it was taken in, once.
	if code, out := releaseOn(t, b1, "", held); code != 200 || out["released"] != true {
		t.Fatalf("release in region b: %d %v", code, out)
	}
	for _, ts := range []*testServer{a2, a1, b1} {
		if code, out := releaseOn(t, ts, "", held); code != 200 || out["released"] != false {
			t.Fatalf("second release: %d %v", code, out)
		}
	}
	forged := []byte(last)
	forged[len(forged)/2] ^= 1
	for _, lease := range []string{string(forged), "not a lease", ""} {
		if code, out := releaseOn(t, a1, "", lease); code != 400 || !strings.HasPrefix(fmt.Sprint(out["message"]), "leaseId:") {
			t.Fatalf("release of %q: %d %v", lease, code, out)
		}
	}
	for _, ts := range []*testServer{a1, a2} {
		poll.Until(t, 10*time.Second, "region a to see the release", func() bool { return inFlightOn(t, ts, probe) == "1" })
	}

	// Extended in region a: a new id, the old one used up.
	code, ext := a1.call(t, "Extend", "", fmt.Sprintf(`{"leaseId":%q}`, last))
	if code != 200 || ext["success"] != true || ext["leaseId"] == last || ext["inFlight"] != "1" {
		t.Fatalf("extend: %d %v", code, ext)
	}
	if code, out := a2.call(t, "Extend", "", fmt.Sprintf(`{"leaseId":%q}`, last)); code != 400 ||
		!strings.Contains(fmt.Sprint(out["message"]), "already") {
		t.Fatalf("second extension: %d %v", code, out)
	}
	// Extended again with another lease: held for it from now, still one
	// slot of the limit.
	code, ext = a2.call(t, "Extend", "", fmt.Sprintf(`{"leaseId":%q,"lease":600}`, ext["leaseId"]))
	var until int64
	fmt.Sscan(fmt.Sprint(ext["expiresAt"]), &until)
	if ends := time.Until(time.UnixMilli(until)); code != 200 || ext["success"] != true || ext["inFlight"] != "1" ||
		ends < 590*time.Second || ends > 661*time.Second {
		t.Fatalf("extension with a lease of 600 s: %d %v (ends in %v)", code, ext, ends)
	}
	if code, out := a2.call(t, "Extend", "", fmt.Sprintf(`{"leaseId":%q,"lease":3601}`, ext["leaseId"])); code != 400 ||
		!strings.HasPrefix(fmt.Sprint(out["message"]), "lease:") {
		t.Fatalf("extension with a lease past an hour: %d %v", code, out)
	}
	if code, out := releaseOn(t, b1, "", ext["leaseId"].(string)); code != 200 || out["released"] != true {
		t.Fatalf("release of the extension: %d %v", code, out)
	}
	poll.Until(t, 10*time.Second, "a2 to see nothing in flight", func() bool { return inFlightOn(t, a2, probe) == "0" })
}

// TestLeaseFreesItselfWhenNotReleased: a holder that never releases (it
// crashed) holds its slot for its lease, and a second more at most.
func TestLeaseFreesItselfWhenNotReleased(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	out := acquireOn(t, ts, "", acquireJSON("crashy", 1, 1, 1))
	taken := time.Now()
	leaseOf(t, out)
	exp, _ := out["expiresAt"].(string)
	var expiresAt int64
	fmt.Sscan(exp, &expiresAt)
	if d := time.UnixMilli(expiresAt).Sub(taken); d < 900*time.Millisecond || d > 2100*time.Millisecond {
		t.Fatalf("expires %v after it was taken, want its lease of 1 s, and a second more at most", d)
	}
	var freed time.Time
	poll.Until(t, 5*time.Second, "the slot to free itself", func() bool {
		got := acquireOn(t, ts, "", acquireJSON("crashy", 1, 1, 1))
		if got["success"] == true {
			freed = time.Now()
			return true
		}
		return false
	})
	if held := freed.Sub(taken); held < time.Second {
		t.Fatalf("the slot freed itself %v after it was taken, before its lease of 1 s", held)
	}
}

// TestLeaseRules: bad acquisitions name the field; a lease of another
// workspace, and a reservation's token, free nothing.
func TestLeaseRules(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b")
	for body, field := range map[string]string{
		`{"namespace":"gpu","identifier":"u","limit":3,"lease":0}`:               "lease:",
		`{"namespace":"gpu","identifier":"u","limit":3,"lease":3601}`:            "lease:",
		`{"namespace":"gpu","identifier":"u","limit":3,"lease":99999999999999}`:  "lease:",
		`{"namespace":"gpu","identifier":"u","limit":3,"lease":10,"cost":0}`:     "cost:",
		`{"namespace":"gpu","identifier":"u","limit":0,"lease":10}`:              "limit:",
		`{"namespace":"gpu","identifier":"u","limit":3}`:                         "lease:",
		`{"namespace":"gpu","identifier":"u","limit":3,"lease":10,"bogus":true}`: "bogus:",
	} {
		if code, out := ts.call(t, "Acquire", tokA, body); code != 400 || !strings.HasPrefix(fmt.Sprint(out["message"]), field) {
			t.Errorf("%s: %d %v", body, code, out)
		}
	}
	lease := leaseOf(t, acquireOn(t, ts, tokA, acquireJSON("u", 1, 60, 1)))
	if code, out := releaseOn(t, ts, tokB, lease); code != 400 {
		t.Fatalf("release by another workspace: %d %v", code, out)
	}
	code, out := ts.call(t, "Limit", tokA, reserveJSON("r", 10))
	tok, _ := out["reservation"].(string)
	if code != 200 || tok == "" {
		t.Fatalf("reserve: %d %v", code, out)
	}
	if code, out := releaseOn(t, ts, tokA, tok); code != 400 {
		t.Fatalf("release of a reservation: %d %v", code, out)
	}
	if code, out := ts.call(t, "Settle", tokA, fmt.Sprintf(`{"reservation":%q,"cost":0}`, lease)); code != 400 ||
		!strings.HasPrefix(fmt.Sprint(out["message"]), "reservation:") {
		t.Fatalf("a lease settled as a reservation: %d %v", code, out)
	}
	if code, out := releaseOn(t, ts, tokA, lease); code != 200 || out["released"] != true {
		t.Fatalf("release by its workspace: %d %v", code, out)
	}
}

// TestLeasesOnUnkeyV2AndGRPC: the v2 routes and the grpc-go port acquire,
// extend and release as Connect does.
func TestLeasesOnUnkeyV2AndGRPC(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	status, raw := ts.post(t, "/v2/ratelimit.acquire", "", strings.NewReader(`{"namespace":"gpu","identifier":"v2","limit":2,"lease":60}`))
	var acq struct {
		Data struct {
			Success  bool   `json:"success"`
			LeaseID  string `json:"leaseId"`
			InFlight int64  `json:"inFlight"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &acq); err != nil || status != 200 || !acq.Data.Success || acq.Data.LeaseID == "" || acq.Data.InFlight != 1 {
		t.Fatalf("v2 acquire: %d %s", status, raw)
	}
	status, raw = ts.post(t, "/v2/ratelimit.extend", "", strings.NewReader(fmt.Sprintf(`{"leaseId":%q}`, acq.Data.LeaseID)))
	var ext struct {
		Data struct {
			LeaseID string `json:"leaseId"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &ext); err != nil || status != 200 || ext.Data.LeaseID == "" {
		t.Fatalf("v2 extend: %d %s", status, raw)
	}
	status, raw = ts.post(t, "/v2/ratelimit.release", "", strings.NewReader(fmt.Sprintf(`{"leaseId":%q}`, ext.Data.LeaseID)))
	if status != 200 || !strings.Contains(string(raw), `"released":true`) || !strings.Contains(string(raw), `"inFlight":0`) {
		t.Fatalf("v2 release: %d %s", status, raw)
	}
	status, raw = ts.post(t, "/v2/ratelimit.acquire", "", strings.NewReader(`{"namespace":"gpu","identifier":"v2","limit":2}`))
	if status != 400 || !strings.Contains(string(raw), "lease") {
		t.Fatalf("v2 acquire without a lease: %d %s", status, raw)
	}

	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	got := new(ratelimitv1.AcquireResponse)
	if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Acquire", &ratelimitv1.AcquireRequest{Namespace: "gpu",
		Identifier: "grpc", Limit: 1, Lease: 60}, got); err != nil || !got.Success || got.LeaseId == "" || got.ExpiresAt == 0 {
		t.Fatalf("grpc-go acquire: %v %v", got, err)
	}
	if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Acquire", &ratelimitv1.AcquireRequest{Namespace: "gpu",
		Identifier: "grpc", Limit: 1, Lease: 60}, got); err != nil || got.Success || got.RetryAfter <= 0 {
		t.Fatalf("grpc-go second acquire of 1: %v %v", got, err)
	}
}
