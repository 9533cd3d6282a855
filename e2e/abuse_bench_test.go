package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// BenchmarkVictimOverHTTPUnderReleaseAttack measures what the attacks on
// Envoy's stream-done release cost another caller of a real API process
// whose leases live in a real MariaDB (the ledger) and counts in a real
// Redis, over HTTP/1.1 `/json` as the attacks were first measured: the
// victim's p50 over 2,000 sequential calls, quiet and while two other
// connections send, as fast as they are answered, release entries of
// forged ids (as many as an entry holds), of one valid id repeated, or
// requests of 99 concurrency descriptors that a blocked one refuses. It
// reports each p50 and its ratio to the quiet one (measured before and
// after the attacks); docs/RELIABILITY.md
// ("Fifth round") holds a run. Run it alone:
//
//	go test -run '^$' -bench VictimOverHTTP -benchtime 1x -count 3 ./e2e
func BenchmarkVictimOverHTTPUnderReleaseAttack(b *testing.B) {
	r := testserver.StartRedis(b)
	m, _ := dbtest.Start(b)
	dir := b.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(`domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: slot
    rate_limit: {unit: minute, requests_per_unit: 1000000, algorithm: concurrency}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`), 0o600); err != nil {
		b.Fatal(err)
	}
	port, grpcPort := testserver.FreePort(b), testserver.FreePort(b)
	cmd := serverCommand("", filepath.Join(bin, "api"))
	cmd.Env = append(os.Environ(), "UNKEY_REGION=bench", "UNKEY_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"UNKEY_GRPC_ADDR=127.0.0.1:"+strconv.Itoa(grpcPort), "UNKEY_AUTH_TOKENS="+floorToken+"=ws_bench",
		"UNKEY_RLS_CONFIG="+rules, "UNKEY_LOG_LEVEL=warn", "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN)
	api := startServing(b, cmd, port, grpcPort, "/readyz")
	url := "http://" + api.addr + "/json"
	newClient := func() *http.Client {
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		return &http.Client{Transport: &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	}
	// post sends body; a 429 is an answer too (the refused requests'),
	// when over is set.
	post := func(c *http.Client, body string, over bool) ([]byte, error) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+floorToken)
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK && !(over && resp.StatusCode == http.StatusTooManyRequests) {
			err = fmt.Errorf("/json answered %d: %s", resp.StatusCode, raw)
		}
		return raw, err
	}
	entry := func(k, v string) string { return fmt.Sprintf(`{"key":%q,"value":%q}`, k, v) }
	request := func(descriptors ...string) string {
		return `{"domain":"d","descriptors":[` + strings.Join(descriptors, ",") + `]}`
	}
	descriptor := func(entries ...string) string { return `{"entries":[` + strings.Join(entries, ",") + `]}` }
	release := func(ids []string) string {
		return request(descriptor(entry("slot", "s"), entry("unkey.release", strings.Join(ids, ","))))
	}
	// As many ids as one entry holds (the server's caps: 100 ids, 8 KiB).
	const maxIDs, maxBytes = 100, 8192
	var forged []string
	for i := range min(maxIDs, maxBytes/151) {
		forged = append(forged, fmt.Sprintf("%0150d", i))
	}
	setup := newClient()
	raw, err := post(setup, request(descriptor(entry("slot", "s"))), false)
	if err != nil {
		b.Fatal(err)
	}
	var held struct {
		DynamicMetadata map[string]any `json:"dynamicMetadata"`
	}
	if err := json.Unmarshal(raw, &held); err != nil {
		b.Fatal(err)
	}
	valid, _ := held.DynamicMetadata["unkey.lease"].(string)
	if valid == "" {
		b.Fatalf("no lease id in %s", raw)
	}
	repeated := slices.Repeat([]string{valid}, min(maxIDs, maxBytes/(len(valid)+1)))
	var refused []string
	for i := range 99 {
		refused = append(refused, descriptor(entry("slot", strconv.Itoa(i))))
	}
	refused = append(refused, descriptor(entry("blocked", "x")))
	attacks := []struct {
		name string
		body string
	}{
		{"forged_ids", release(forged)},
		{"one_id_repeated", release(repeated)},
		{"refused_99_slots", request(refused...)},
	}
	victim := request(descriptor(entry("user", "victim")))
	const calls = 2000
	p50 := func(attack string) (time.Duration, int) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		sent := 0
		if attack != "" {
			for range 2 {
				c := newClient()
				wg.Go(func() {
					defer c.CloseIdleConnections()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := post(c, attack, true); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						sent++
						mu.Unlock()
					}
				})
			}
		}
		c := newClient()
		defer c.CloseIdleConnections()
		took := make([]time.Duration, 0, calls)
		for range calls {
			began := time.Now()
			if _, err := post(c, victim, false); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(began))
		}
		close(stop)
		wg.Wait()
		slices.Sort(took)
		return took[len(took)/2], sent
	}
	for b.Loop() {
		// Quiet first and last: the baseline is their mean, so that a
		// machine that warms up or slows down meanwhile shows in it.
		first, _ := p50("")
		measured := make([]time.Duration, len(attacks))
		sent := make([]int, len(attacks))
		for i, a := range attacks {
			measured[i], sent[i] = p50(a.body)
		}
		last, _ := p50("")
		quiet := (first + last) / 2
		b.ReportMetric(float64(quiet.Microseconds()), "p50-µs-quiet")
		b.Logf("quiet: victim p50 %v first, %v last", first, last)
		for i, a := range attacks {
			b.ReportMetric(float64(measured[i].Microseconds()), "p50-µs-"+a.name)
			b.ReportMetric(float64(measured[i])/float64(quiet), "x-quiet-"+a.name)
			b.Logf("%s: victim p50 %v (%.2f× quiet), %d attack calls meanwhile", a.name, measured[i], float64(measured[i])/float64(quiet), sent[i])
		}
	}
}
