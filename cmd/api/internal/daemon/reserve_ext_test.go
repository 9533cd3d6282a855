package daemon_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/command"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/services/ratelimit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// reserveJSON is a Limit with reserve of cost tokens of a budget of 1,000
// (30-day window: no test crosses its boundary).
func reserveJSON(id string, cost int) string {
	return fmt.Sprintf(`{"namespace":"llm","identifier":%q,"limit":1000,"duration":2592000000,"cost":%d,"reserve":true}`, id, cost)
}

func checkJSON(id string) string {
	return fmt.Sprintf(`{"namespace":"llm","identifier":%q,"limit":1000,"duration":2592000000,"cost":0}`, id)
}

// remainingOf is what a check on ts says is left of id's budget.
func remainingOf(t *testing.T, ts *testServer, id string) string {
	t.Helper()
	_, out := ts.call(t, "Limit", "", checkJSON(id))
	r, _ := out["remaining"].(string)
	return r
}

func reserveOn(t *testing.T, ts *testServer, id string, cost int) string {
	t.Helper()
	code, out := ts.call(t, "Limit", "", reserveJSON(id, cost))
	tok, _ := out["reservation"].(string)
	if code != 200 || out["success"] != true || tok == "" {
		t.Fatalf("reserve %d: %d %v", cost, code, out)
	}
	return tok
}

func settleOn(t *testing.T, ts *testServer, token string, cost int) (int, map[string]any) {
	t.Helper()
	return ts.call(t, "Settle", "", fmt.Sprintf(`{"reservation":%q,"cost":%d}`, token, cost))
}

// TestReserveAndSettleAcrossProcessesAndRegions runs two regions on one
// MariaDB, region a with two processes on its Redis. A reservation made on
// one process settles on another, and the refund reaches every process of
// both regions; a second settle (in the same process, another, or another
// region), a forged token and one of another workspace give nothing back.
func TestReserveAndSettleAcrossProcessesAndRegions(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	ra, rb := testserver.StartRedis(t), testserver.StartRedis(t)
	start := func(region string, r *testserver.Redis) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN,
			"UNKEY_GLOBAL_FLUSH_INTERVAL=200ms", "UNKEY_GLOBAL_SYNC_INTERVAL=200ms")
	}
	a1, a2, b1 := start("a", ra), start("a", ra), start("b", rb)
	const id = "team_42"

	first := reserveOn(t, a1, id, 600)
	poll.Until(t, 5*time.Second, "a2 to see a1's reservation", func() bool { return remainingOf(t, a2, id) == "400" })
	second := reserveOn(t, a2, id, 300)
	poll.Until(t, 10*time.Second, "region b to see both reservations",
		func() bool { return remainingOf(t, b1, id) == "100" })

	// Settled on another process than the one that reserved: 100 of 600
	// spent, 500 given back.
	code, out := settleOn(t, a2, first, 100)
	if code != 200 || out["refunded"] != "500" || out["remaining"] != "600" || out["success"] != true {
		t.Fatalf("settle at 100 of 600: %d %v", code, out)
	}
	poll.Until(t, 5*time.Second, "a1 to see the refund", func() bool { return remainingOf(t, a1, id) == "600" })
	poll.Until(t, 10*time.Second, "region b to see the refund", func() bool { return remainingOf(t, b1, id) == "600" })

	// Settling again gives back nothing more, wherever it is asked.
	for _, ts := range []*testServer{a2, a1, b1} {
		if code, out := settleOn(t, ts, first, 0); code != 409 || !strings.Contains(fmt.Sprint(out["message"]), "already settled") {
			t.Fatalf("second settle: %d %v", code, out)
		}
	}
	// A forged token, and a real one of another workspace.
	forged := []byte(first)
	forged[len(forged)/2] ^= 1
	for _, tok := range []string{string(forged), "not a token", ""} {
		if code, out := settleOn(t, a1, tok, 0); code != 400 || !strings.Contains(fmt.Sprint(out["message"]), "reservation") {
			t.Fatalf("settle of %q: %d %v", tok, code, out)
		}
	}

	// The second reservation settles in region b, above its estimate: the
	// extra 150 is counted there like a report, and reaches region a.
	code, out = settleOn(t, b1, second, 450)
	if code != 200 || out["refunded"] != "0" || out["remaining"] != "450" {
		t.Fatalf("settle at 450 of 300 in region b: %d %v", code, out)
	}
	poll.Until(t, 10*time.Second, "region a to see the extra", func() bool { return remainingOf(t, a1, id) == "450" })
	if code, _ := settleOn(t, a1, second, 0); code != 409 {
		t.Fatalf("a settle in region a after one in region b answered %d, want 409", code)
	}
	poll.Until(t, 10*time.Second, "a2 to see the extra", func() bool { return remainingOf(t, a2, id) == "450" })
	if rem := remainingOf(t, a1, id); rem != "450" {
		t.Fatalf("after the refused settles: remaining %s, want 450 (nothing more given back)", rem)
	}
}

// TestReservationOfAnotherWorkspace: a reservation settles only in the
// workspace that made it.
func TestReservationOfAnotherWorkspace(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b")
	code, out := ts.call(t, "Limit", tokA, reserveJSON("u", 10))
	tok, _ := out["reservation"].(string)
	if code != 200 || tok == "" {
		t.Fatalf("reserve: %d %v", code, out)
	}
	if code, out := ts.call(t, "Settle", tokB, fmt.Sprintf(`{"reservation":%q,"cost":0}`, tok)); code != 400 {
		t.Fatalf("settle by another workspace: %d %v", code, out)
	}
	if code, out := ts.call(t, "Settle", tokA, fmt.Sprintf(`{"reservation":%q,"cost":0}`, tok)); code != 200 || out["refunded"] != "10" {
		t.Fatalf("settle by its workspace: %d %v", code, out)
	}
}

// TestReserveRules: a reservation is refused where it makes no sense, with
// the field named; a denied reservation answers no token.
func TestReserveRules(t *testing.T) {
	ts := startServer(t)
	for body, field := range map[string]string{
		`{"namespace":"llm","identifier":"u","limit":10,"duration":60000,"reserve":true,"report":true}`: "reserve",
		`{"namespace":"llm","identifier":"u","limit":10,"duration":60000,"cost":-1,"reserve":true}`:     "cost",
	} {
		if code, out := ts.call(t, "Limit", "", body); code != 400 || !strings.HasPrefix(fmt.Sprint(out["message"]), field+":") {
			t.Errorf("%s: %d %v", body, code, out)
		}
	}
	if code, out := ts.call(t, "MultiLimit", "", `{"limits":[`+reserveJSON("u", 1)+`]}`); code != 400 ||
		!strings.HasPrefix(fmt.Sprint(out["message"]), "limits[0].reserve:") {
		t.Errorf("MultiLimit with a reservation: %d %v", code, out)
	}
	if code, out := ts.call(t, "BatchLimit", "", `{"limits":[`+reserveJSON("u", 1)+`]}`); code != 400 ||
		!strings.HasPrefix(fmt.Sprint(out["message"]), "limits[0].reserve:") {
		t.Errorf("BatchLimit with a reservation: %d %v", code, out)
	}
	if code, out := ts.call(t, "Limit", "", reserveJSON("big", 1001)); code != 200 || out["success"] != false || out["reservation"] != "" {
		t.Errorf("a reservation above the budget: %d %v", code, out)
	}
	if code, out := ts.call(t, "Limit", "", reserveJSON("u", 0)); code != 400 || !strings.HasPrefix(fmt.Sprint(out["message"]), "cost:") {
		t.Errorf("a reservation of nothing: %d %v", code, out)
	}
	tok := reserveOn(t, ts, "u", 10)
	if code, out := settleOn(t, ts, tok, -5); code != 400 || !strings.HasPrefix(fmt.Sprint(out["message"]), "cost:") {
		t.Errorf("settle at a negative cost: %d %v", code, out)
	}
	if code, out := ts.call(t, "Settle", "", fmt.Sprintf(`{"reservation":%q}`, tok)); code != 400 ||
		!strings.HasPrefix(fmt.Sprint(out["message"]), "cost: missing") {
		t.Errorf("settle without a cost: %d %v", code, out)
	}
}

// TestReservationSettlesWhereItsLedgerIs: processes that share a secret
// (UNKEY_RESERVATION_SECRET) but no store would each record a settle of
// their own; a reservation settles only in the process that issued it.
func TestReservationSettlesWhereItsLedgerIs(t *testing.T) {
	secret := "UNKEY_RESERVATION_SECRET=" + strings.Repeat("s", 32)
	a, b := startServer(t, secret), startServer(t, secret)
	tok := reserveOn(t, a, "u", 100)
	if code, out := settleOn(t, b, tok, 0); code != 400 || !strings.Contains(fmt.Sprint(out["message"]), "another process") {
		t.Fatalf("settle on another process without a shared store: %d %v", code, out)
	}
	if code, out := settleOn(t, a, tok, 0); code != 200 || out["refunded"] != "100" {
		t.Fatalf("settle on the issuing process: %d %v", code, out)
	}
}

// TestSettleOnUnkeyV2AndGRPC: the v2 route and the grpc-go port reserve and
// settle as Connect does; a second settle is Unkey's 409 and gRPC's
// already_exists.
func TestSettleOnUnkeyV2AndGRPC(t *testing.T) {
	ts := startServer(t, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	status, raw := ts.post(t, "/v2/ratelimit.limit", "", strings.NewReader(
		`{"namespace":"llm","identifier":"v2","limit":100,"duration":60000,"cost":40,"reserve":true}`))
	var limit struct {
		Data struct {
			Reservation string `json:"reservation"`
			Remaining   int64  `json:"remaining"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &limit); err != nil || status != 200 || limit.Data.Reservation == "" || limit.Data.Remaining != 60 {
		t.Fatalf("v2 reserve: %d %s", status, raw)
	}
	body := fmt.Sprintf(`{"reservation":%q,"cost":25}`, limit.Data.Reservation)
	status, raw = ts.post(t, "/v2/ratelimit.settle", "", strings.NewReader(body))
	if status != 200 || !strings.Contains(string(raw), `"refunded":15`) || !strings.Contains(string(raw), `"remaining":75`) {
		t.Fatalf("v2 settle: %d %s", status, raw)
	}
	status, raw = ts.post(t, "/v2/ratelimit.settle", "", strings.NewReader(body))
	if status != 409 || !strings.Contains(string(raw), "already settled") {
		t.Fatalf("v2 second settle: %d %s", status, raw)
	}

	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	cost := int64(500)
	res := new(ratelimitv1.LimitResponse)
	if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{Namespace: "llm",
		Identifier: "grpc", Limit: 1000, Duration: 60000, Cost: &cost, Reserve: true}, res); err != nil || res.Reservation == "" {
		t.Fatalf("grpc-go reserve: %v %v", res, err)
	}
	settled := new(ratelimitv1.SettleResponse)
	spent := int64(120)
	req := &ratelimitv1.SettleRequest{Reservation: res.Reservation, Cost: &spent}
	if err := conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Settle", req, settled); err != nil ||
		settled.Refunded != 380 || settled.Remaining != 880 {
		t.Fatalf("grpc-go settle: %v %v", settled, err)
	}
	err = conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Settle", req, settled)
	if grpcstatus.Code(err) != codes.AlreadyExists {
		t.Fatalf("grpc-go second settle: %v, want already_exists", err)
	}
}

// TestMigrateAddsRefunds: `api migrate` on the window counts table of the
// version before reservations (no refunded column) keeps every row, gives
// each no refunds, and the processes then publish and read refunds in it.
func TestMigrateAddsRefunds(t *testing.T) {
	t.Parallel()
	m := testserver.StartMariaDB(t)
	sqlDB, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	if _, err := sqlDB.Exec("CREATE TABLE ratelimit_window_counts (" +
		"pk bigint unsigned AUTO_INCREMENT NOT NULL, workspace_id varchar(191) NOT NULL, namespace varchar(255) NOT NULL, " +
		"identifier varchar(255) NOT NULL, duration_ms bigint unsigned NOT NULL, sequence bigint NOT NULL, " +
		"region varchar(48) NOT NULL, count bigint unsigned NOT NULL, expires_at bigint unsigned NOT NULL, " +
		"updated_at bigint unsigned NOT NULL, window_limit bigint unsigned NOT NULL DEFAULT 0, PRIMARY KEY (pk), " +
		"UNIQUE KEY unique_window_region (workspace_id, namespace, identifier, duration_ms, sequence, region), " +
		"KEY expires_at_idx (expires_at), KEY lookup_idx (workspace_id, namespace, identifier, duration_ms, sequence), " +
		"KEY updated_at_idx (updated_at)) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"); err != nil {
		t.Fatal(err)
	}
	seq := time.Now().UnixMilli() / 60_000
	for i, region := range []string{"us", "eu", "ap"} {
		if _, err := sqlDB.Exec(`INSERT INTO ratelimit_window_counts (workspace_id, namespace, identifier, duration_ms,
			sequence, region, count, expires_at, updated_at, window_limit) VALUES ('ws', 'llm', 'team', 60000, ?, ?, ?, ?, 1, 1000)`,
			seq, region, 100*(i+1), (seq+2)*60_000); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // a second run changes nothing
		if err := command.Migrate(context.Background(), []string{"UNKEY_MYSQL_DSN=" + m.DSN}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	var rows, total, refunded int64
	if err := sqlDB.QueryRow("SELECT COUNT(*), SUM(count), SUM(refunded) FROM ratelimit_window_counts").Scan(&rows, &total, &refunded); err != nil {
		t.Fatal(err)
	}
	if rows != 3 || total != 600 || refunded != 0 {
		t.Fatalf("after migrate: %d rows counting %d with %d refunded; want 3, 600, 0", rows, total, refunded)
	}
	st := mysqlstore.New(sqlDB)
	k := store.CellKey{Workspace: "ws", Namespace: "llm", Identifier: "team", Duration: time.Minute, Sequence: seq, Refunds: true}
	if _, err := st.Publish(context.Background(), "us", []store.CellCount{{Key: k, Count: 40, Limit: 1000}}); err != nil {
		t.Fatal(err)
	}
	got, _, err := st.Sync(context.Background(), "eu", time.Now(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var cell, refunds store.GlobalCount
	for _, g := range got {
		if g.Key.Refunds {
			refunds = g
		} else {
			cell = g
		}
	}
	if cell.Own != 200 || cell.Others != 400 || refunds.Others != 40 || refunds.Own != 0 {
		t.Fatalf("eu reads the cell as %+v and its refunds as %+v; want own 200, others 400, refunds of others 40", cell, refunds)
	}
}
